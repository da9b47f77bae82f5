/* SPDX-License-Identifier: MIT */
/*
 * tools.c — the etcd backend's harness operations (src/harness/tools.h),
 * for dlock bench and dlock check: compiled into dlock_harness, not
 * libdlock.so.
 */
#include "ec_int.h"
#include "harness/tools.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A second connection's watch on key, from revision from, that records when
 * its first event came (the relay's far end). */
typedef struct relay_watch {
    ecclient *ec;
    ec_conn *k;
    int64_t fired_ns;
    bool created, fired;
    int rc;
    bool stop;
} relay_watch;

static void relay_line(void *arg, cJSON *j)
{
    relay_watch *w = arg;
    const cJSON *r = ec_jobj(j, "result");
    if (cJSON_GetArraySize(ec_jarr(r, "events")) > 0 && !w->fired) {
        w->fired_ns = dl_now_ns();
        w->fired = true;
    } else if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "created"))) {
        __atomic_store_n(&w->created, true, __ATOMIC_RELEASE);
    }
}

static void *relay_main(void *arg)
{
    relay_watch *w = arg;
    ec_xres res;
    enum xfer x = ec_conn_run(w->k, dl_deadline_in(w->ec->op_ms), -1, &w->fired, &res);
    w->rc = w->fired ? 0 : x == XFER_TIMEOUT ? DLOCK_ETIMEDOUT : DLOCK_EUNREACHABLE;
    __atomic_store_n(&w->stop, true, __ATOMIC_RELEASE);
    return NULL;
}

/* The scratch key of a tool, beside the name's queue, not in it. */
static void tool_key(ecclient *ec, const char *name, const char *what, char *buf, size_t len)
{
    snprintf(buf, len, "%s/.tools/%s/%s", ec->prefix, name, what);
}

/* The least a lock costs: one put bound to the client's lease and one
 * delete, one after the other, over the same kept-alive connections. */
static int etcd_tool_baseline(dlock_client *c, const char *name, int iters, int64_t max_ns,
                              dh_timing *out)
{
    ecclient *ec = ec_of(c);
    char err[300] = "", key[EC_KEY_MAX], b64k[EC_KEY_MAX * 2], put[EC_KEY_MAX * 2 + 100];
    char del[EC_KEY_MAX * 2 + 32];
    int64_t lease;
    uint64_t gen;
    bool make_ckey;
    int rc = ec_lease_ensure(ec, -1, &lease, &gen, &make_ckey, err, sizeof err);
    tool_key(ec, name, "baseline", key, sizeof key);
    ec_b64_encode(key, strlen(key), b64k);
    snprintf(put, sizeof put, "{\"key\":\"%s\",\"lease\":\"%" PRId64 "\"}", b64k, lease);
    snprintf(del, sizeof del, "{\"key\":\"%s\"}", b64k);
    int64_t *v = malloc(sizeof *v * (size_t)(iters > 0 ? iters : 1));
    if (!v && !rc) {
        rc = DLOCK_ENOMEM;
        snprintf(err, sizeof err, "out of memory");
    }
    size_t n = 0;
    int64_t stop = dl_now_ns() + max_ns;
    for (int i = -20; rc == 0 && i < iters && dl_now_ns() < stop; i++) {
        int64_t t0 = dl_now_ns();
        rc = ec_post(ec, "/v3/kv/put", put, -1, -1, NULL, NULL, err, sizeof err);
        if (rc == 0)
            rc = ec_post(ec, "/v3/kv/deleterange", del, -1, -1, NULL, NULL, err, sizeof err);
        if (rc == 0 && i >= 0) /* the first twenty warm up */
            v[n++] = dl_now_ns() - t0;
    }
    return dh_done(c, rc, "baseline", err, v, n, out,
                     "one put bound to the client's lease then its delete (HTTP keep-alive)");
}

/* The bare hand-over chain: one connection's delete reaching another
 * connection's watch, from just before the delete to the event. */
static int etcd_tool_relay(dlock_client *c, const char *name, int iters, dh_timing *out)
{
    ecclient *ec = ec_of(c);
    char err[300] = "", key[EC_KEY_MAX], b64k[EC_KEY_MAX * 2], put[EC_KEY_MAX * 2 + 32];
    char del[EC_KEY_MAX * 2 + 32], watch[EC_KEY_MAX * 2 + 100];
    tool_key(ec, name, "relay", key, sizeof key);
    ec_b64_encode(key, strlen(key), b64k);
    snprintf(put, sizeof put, "{\"key\":\"%s\"}", b64k);
    snprintf(del, sizeof del, "{\"key\":\"%s\"}", b64k);
    int64_t *v = malloc(sizeof *v * (size_t)(iters > 0 ? iters : 1));
    int rc = v ? 0 : DLOCK_ENOMEM;
    size_t n = 0;
    for (int i = -5; rc == 0 && i < iters; i++) {
        cJSON *j = NULL;
        rc = ec_post(ec, "/v3/kv/put", put, -1, -1, &j, NULL, err, sizeof err);
        int64_t rev = ec_header_rev(j);
        cJSON_Delete(j);
        if (rc)
            break;
        snprintf(watch, sizeof watch,
                 "{\"create_request\":{\"key\":\"%s\",\"start_revision\":\"%" PRId64
                 "\",\"filters\":[\"NOPUT\"]}}",
                 b64k, rev + 1);
        relay_watch w = {.ec = ec, .k = ec_conn_get(ec)};
        pthread_mutex_lock(&ec->mu);
        const char *base = ec->endpoints[ec->cur];
        pthread_mutex_unlock(&ec->mu);
        pthread_t t;
        if (!w.k || ec_conn_setup(ec, w.k, base, "/v3/watch", watch, ec->connect_ms) ||
            (w.k->body.on_line = relay_line, w.k->body.arg = &w,
             pthread_create(&t, NULL, relay_main, &w))) {
            ec_conn_put(ec, w.k);
            rc = DLOCK_ENOMEM;
            snprintf(err, sizeof err, "out of memory");
            break;
        }
        int64_t until = dl_deadline_in(ec->op_ms);
        while (!__atomic_load_n(&w.created, __ATOMIC_ACQUIRE) &&
               !__atomic_load_n(&w.stop, __ATOMIC_ACQUIRE) && dl_now_ns() < until) {
            struct timespec us100 = {0, 100000};
            nanosleep(&us100, NULL);
        }
        struct timespec ms1 = {0, 1000000};
        nanosleep(&ms1, NULL);
        int64_t t0 = dl_now_ns();
        rc = ec_post(ec, "/v3/kv/deleterange", del, -1, -1, NULL, NULL, err, sizeof err);
        pthread_join(t, NULL);
        ec_conn_put(ec, w.k);
        if (rc == 0 && w.rc) {
            rc = w.rc;
            snprintf(err, sizeof err, "the watch saw no delete");
        }
        if (rc == 0 && i >= 0)
            v[n++] = w.fired_ns - t0;
    }
    return dh_done(c, rc, "relay", err, v, n, out,
                     "one connection's delete reaching another connection's watch (to its event)");
}

/* A member's own status: its id, the leader it knows (0: none). */
static int member_status(dlock_client *c, const char *host, int port, uint64_t *id,
                         uint64_t *leader)
{
    ecclient *ec = ec_of(c);
    char base[400], err[300];
    snprintf(base, sizeof base, strchr(host, ':') ? "%s://[%s]:%d" : "%s://%s:%d",
             ec->tls ? "https" : "http", host, port);
    cJSON *j = NULL;
    int rc = ec_post_to(ec, base, "/v3/maintenance/status", "{}", -1, -1, &j, NULL, err,
                        sizeof err);
    if (rc)
        return dl_client_err(c, rc, "etcd %s:%d: %s", host, port, err);
    *id = ec_juint(ec_jobj(j, "header"), "member_id");
    *leader = ec_juint(j, "leader");
    cJSON_Delete(j);
    return 0;
}

/* A member that knows a leader serves. */
static int etcd_tool_ready(dlock_client *c, const dh_member *m)
{
    uint64_t id, leader;
    int rc = member_status(c, m->addr.host, m->addr.port, &id, &leader);
    if (rc)
        return rc;
    if (!leader)
        return dl_client_err(c, DLOCK_EBUSY, "etcd %s:%d knows no leader yet (no quorum?)",
                             m->addr.host, m->addr.port);
    return 0;
}

static int etcd_tool_leader(dlock_client *c, dh_server *out)
{
    for (size_t i = 0; i < c->url->nhosts; i++) {
        const dl_host *h = &c->url->hosts[i];
        uint64_t id, leader;
        if (member_status(c, h->host, h->port, &id, &leader) == 0 && leader && id == leader) {
            snprintf(out->host, sizeof out->host, "%s", h->host);
            out->port = h->port;
            return 0;
        }
    }
    return dl_client_err(c, DLOCK_EUNREACHABLE, "no member of %s says it leads",
                         ec_of(c)->redacted);
}

const struct dh_tools dh_tools_etcd = {
    .baseline = etcd_tool_baseline,
    .relay = etcd_tool_relay,
    .lock_servers = dh_url_servers,
    .topology = dh_url_topology,
    .members = dh_url_members,
    .server_ready = etcd_tool_ready,
    .settle = dh_settle_ensemble,
    .leader = etcd_tool_leader,
};
