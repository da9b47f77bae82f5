/* SPDX-License-Identifier: MIT */
/*
 * tools.c — the ZooKeeper backend's harness operations (src/harness/tools.h),
 * for dlock bench and dlock check: compiled into dlock_harness, not
 * libdlock.so.
 */
#include "zk_int.h"
#include "harness/tools.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A second session on the same servers, for a tool that needs two
 * clients (the hand-over chain): NULL with err on failure. */
static zkclient *zkclient_second(zkclient *zc, char *err, size_t errlen)
{
    zkclient *z2 = calloc(1, sizeof *z2);
    if (!z2) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&z2->mu, NULL);
    pthread_cond_init(&z2->cv, NULL);
    pthread_rwlock_init(&z2->rw, NULL);
    z2->session_ms = zc->session_ms;
    z2->connect_ms = zc->connect_ms;
    z2->op_ms = zc->op_ms;
    z2->redacted = zc->redacted;
    z2->acl = zc->acl;
    z2->hosts = strdup(zc->hosts);
    z2->base = strdup(zc->base);
    z2->layout = zc->layout;
    z2->cred = zc->cred ? strdup(zc->cred) : NULL;
    if (!z2->hosts || !z2->base || (zc->cred && !z2->cred)) {
        snprintf(err, errlen, "out of memory");
        zkclient_free(z2);
        return NULL;
    }
    if (zk_session_open(z2, -1, NULL, err, errlen) != 0) {
        zkclient_free(z2);
        return NULL;
    }
    return z2;
}

/* A timing tool's end (dh_done, with ZooKeeper's error words). */
static int tool_done(dlock_client *c, int rc, const char *tool, int64_t *v, size_t n,
                     dh_timing *out, const char *what)
{
    char err[300] = "";
    if (rc != ZOK)
        zk_why(zc_of(c), rc, err, sizeof err);
    return dh_done(c, rc == ZOK ? 0 : zk_code(rc), tool, err, v, n, out, what);
}

/* The scratch node prefix of a tool under the name's node (left out of
 * dlock's queue: "tool-" nodes are its own). A peer's layout counts every
 * child (Curator) or may: there they go beside it, under NAME-dlock-tools. */
static int tool_prefix(zk_op *op, const char *name, const char *what, char *buf, size_t len)
{
    char parent[ZK_PATH_MAX];
    if (zk_parent_of(op->zc, name, parent, sizeof parent))
        return ZBADARGUMENTS;
    if (op->zc->layout != ZK_LAYOUT_DLOCK &&
        strlen(parent) + sizeof "-dlock-tools" > sizeof parent)
        return ZBADARGUMENTS;
    if (op->zc->layout != ZK_LAYOUT_DLOCK)
        strcat(parent, "-dlock-tools");
    if (!zk_pjoin(buf, len, parent, what))
        return ZBADARGUMENTS;
    return zk_ensure_parent(op, parent, zk_op_until(op->zc));
}

/* The least a lock recipe costs: one ephemeral sequential create and one
 * delete, one after the other, through the same client code. */
static int zk_tool_baseline(dlock_client *c, const char *name, int iters, int64_t max_ns,
                            dh_timing *out)
{
    zkclient *zc = zc_of(c);
    zk_op op;
    char err[300], prefix[ZK_PATH_MAX];
    int rc = zk_op_begin(zc, true, &op, err, sizeof err);
    if (rc)
        return dl_client_err(c, rc, "baseline: %s (%s)", err, zc->redacted);
    int64_t *v = malloc(sizeof *v * (size_t)(iters > 0 ? iters : 1));
    rc = v ? tool_prefix(&op, name, "tool-baseline-", prefix, sizeof prefix) : ZSYSTEMERROR;
    size_t n = 0;
    int64_t stop = dl_now_ns() + max_ns;
    for (int i = -20; rc == ZOK && i < iters && dl_now_ns() < stop; i++) {
        int64_t t0 = dl_now_ns();
        zk_call *cr = zk_send(&op, CALL_CREATE, prefix, "", ZOO_EPHEMERAL_SEQUENTIAL, &zc->acl);
        rc = zk_result(&op, cr, zk_op_until(zc));
        if (rc == ZOK)
            rc = zk_do(&op, CALL_VOID, cr->path, NULL, zk_op_until(zc), NULL);
        zk_call_drop(cr);
        if (rc == ZOK && i >= 0) /* the first twenty warm up */
            v[n++] = dl_now_ns() - t0;
    }
    zk_op_end(&op);
    return tool_done(c, rc, "baseline", v, n, out,
                     "one ephemeral sequential create then its delete, on one session");
}

/* The bare hand-over chain: one session's delete firing another session's
 * exists watch, from just before the delete to the watch's callback. */
static int zk_tool_relay(dlock_client *c, const char *name, int iters, dh_timing *out)
{
    zkclient *zc = zc_of(c);
    zk_op op, op2;
    char err[300], path[ZK_PATH_MAX];
    int rc = zk_op_begin(zc, true, &op, err, sizeof err);
    if (rc)
        return dl_client_err(c, rc, "relay: %s (%s)", err, zc->redacted);
    zkclient *z2 = zkclient_second(zc, err, sizeof err);
    if (!z2) {
        zk_op_end(&op);
        return dl_client_err(c, DLOCK_EUNREACHABLE, "relay: %s (%s)", err, zc->redacted);
    }
    rc = zk_op_begin(z2, false, &op2, err, sizeof err);
    if (rc) {
        zk_op_end(&op);
        zkclient_free(z2);
        return dl_client_err(c, rc, "relay: %s (%s)", err, zc->redacted);
    }
    int64_t *v = malloc(sizeof *v * (size_t)(iters > 0 ? iters : 1));
    char prefix[ZK_PATH_MAX];
    rc = v ? tool_prefix(&op, name, "tool-relay-", prefix, sizeof prefix) : ZSYSTEMERROR;
    size_t n = 0;
    for (int i = -5; rc == ZOK && i < iters; i++) {
        zk_call *cr = zk_send(&op, CALL_CREATE, prefix, "", ZOO_EPHEMERAL_SEQUENTIAL, &zc->acl);
        rc = zk_result(&op, cr, zk_op_until(zc));
        if (rc == ZOK && !zk_pjoin(path, sizeof path, "", cr->path + 1))
            rc = ZBADARGUMENTS;
        zk_call_drop(cr);
        if (rc != ZOK)
            break;
        zk_call *w = zk_watch(&op2, CALL_STAT, path);
        rc = zk_result(&op2, w, zk_op_until(zc));
        if (rc == ZOK) {
            struct timespec ms1 = {0, 1000000};
            nanosleep(&ms1, NULL);
            int64_t t0 = dl_now_ns();
            zk_call *d = zk_send(&op, CALL_VOID, path, NULL, 0, NULL);
            rc = zk_call_wait_for(w, &w->fired, NULL, NULL, op2.evfd, zk_op_until(zc), -1)
                     ? ZOPERATIONTIMEOUT
                     : ZOK;
            pthread_mutex_lock(&z2->mu);
            int64_t t1 = w->fired_ns;
            pthread_mutex_unlock(&z2->mu);
            if (rc == ZOK && i >= 0)
                v[n++] = t1 - t0;
            if (zk_result(&op, d, zk_op_until(zc)) != ZOK && rc == ZOK)
                rc = d ? d->rc : ZSYSTEMERROR;
            zk_call_drop(d);
        }
        zk_call_drop(w);
    }
    zk_op_end(&op2);
    zk_op_end(&op);
    zkclient_free(z2);
    return tool_done(
        c, rc, "relay", v, n, out,
        "one session's delete firing another session's exists watch (to its callback)");
}

/* ---- for `dlock check`: the ensemble ------------------------------------------------ */

/* A member that says its mode (standalone, leader, follower) serves. */
static int zk_tool_ready(dlock_client *c, const dh_member *m)
{
    char buf[1024], why[128];
    if (zk_ask(zc_of(c)->op_ms, m->addr.host, m->addr.port, "srvr", buf, sizeof buf, why,
               sizeof why))
        return dl_client_err(c, DLOCK_EUNREACHABLE, "zk %s:%d: %s", m->addr.host, m->addr.port,
                             why);
    if (!strstr(buf, "\nMode: ") && strncmp(buf, "Mode: ", 6) != 0)
        return dl_client_err(c, DLOCK_EBUSY, "zk %s:%d is not serving yet (no quorum?)",
                             m->addr.host, m->addr.port);
    return 0;
}

static int zk_tool_leader(dlock_client *c, dh_server *out)
{
    char buf[1024], why[128];
    for (size_t i = 0; i < c->url->nhosts; i++) {
        const dl_host *h = &c->url->hosts[i];
        if (zk_ask(zc_of(c)->op_ms, h->host, h->port, "srvr", buf, sizeof buf, why,
                   sizeof why) == 0 &&
            (strstr(buf, "Mode: leader") || strstr(buf, "Mode: standalone"))) {
            snprintf(out->host, sizeof out->host, "%s", h->host);
            out->port = h->port;
            return 0;
        }
    }
    return dl_client_err(c, DLOCK_EUNREACHABLE, "no member of %s says it leads",
                         zc_of(c)->redacted);
}

const struct dh_tools dh_tools_zk = {
    .baseline = zk_tool_baseline,
    .relay = zk_tool_relay,
    .lock_servers = dh_url_servers,
    .topology = dh_url_topology,
    .members = dh_url_members,
    .server_ready = zk_tool_ready,
    .settle = dh_settle_ensemble,
    .leader = zk_tool_leader,
};
