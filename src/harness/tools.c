/* SPDX-License-Identifier: MIT */
/*
 * tools.c — the harness operations of tools.h, dispatched through the
 * backend's table in the registry (dh_registry).
 */
#include "harness/tools.h"

#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

const struct dh_tools *dh_tools_for(const char *backend)
{
    for (const dh_entry *e = dh_registry; backend && e->backend; e++)
        if (strcmp(e->backend, backend) == 0)
            return e->tools;
    return NULL;
}

/* The backend's table (NULL when it has none), or NULL with *rc set (and
 * the client's error) when the arguments are wrong. */
static const struct dh_tools *ops_of(dlock_client *c, const void *out, int *rc)
{
    if (!c || c->closed || !out) {
        *rc = DLOCK_EINVAL;
        if (c)
            dl_client_err(c, DLOCK_EINVAL, "invalid argument");
        return NULL;
    }
    *rc = 0;
    return dh_tools_for(c->be->name);
}

/* The same, for an operation on lock `name`. */
static const struct dh_tools *ops(dlock_client *c, const char *name, const void *out, int *rc)
{
    const struct dh_tools *t = ops_of(c, out, rc);
    if (*rc)
        return NULL;
    char why[128];
    if (dlock_name_valid(name, why, sizeof why) != 0) {
        *rc = dl_client_err(c, DLOCK_ENAME, "%s", why);
        return NULL;
    }
    return t;
}

static int notsup(dlock_client *c, const char *what)
{
    return dl_client_err(c, DLOCK_ENOTSUP, "the %s backend has no %s", c->be->name, what);
}

int dh_baseline(dlock_client *c, const char *name, int iters, int64_t max_ns,
                dh_timing *out)
{
    int rc;
    const struct dh_tools *t = ops(c, name, out, &rc);
    if (rc)
        return rc;
    if (!t || !t->baseline)
        return notsup(c, "baseline round trip");
    if (iters < 1 || max_ns <= 0)
        return dl_client_err(c, DLOCK_EINVAL, "baseline: no samples asked for");
    memset(out, 0, sizeof *out);
    return t->baseline(c, name, iters, max_ns, out);
}

int dh_relay(dlock_client *c, const char *name, int iters, dh_timing *out)
{
    int rc;
    const struct dh_tools *t = ops(c, name, out, &rc);
    if (rc)
        return rc;
    if (!t || !t->relay)
        return notsup(c, "bare hand-over chain to time");
    if (iters < 1)
        return dl_client_err(c, DLOCK_EINVAL, "relay: no rounds asked for");
    memset(out, 0, sizeof *out);
    return t->relay(c, name, iters, out);
}

int dh_read_counters(dlock_client *c, const char *name, dh_counters *out)
{
    int rc;
    const struct dh_tools *t = ops(c, name, out, &rc);
    if (rc)
        return rc;
    if (!t || !t->counters)
        return notsup(c, "server command counters");
    memset(out, 0, sizeof *out);
    return t->counters(c, name, out);
}

int dh_lock_servers(dlock_client *c, const char *name, dh_server *out, int max)
{
    int rc;
    const struct dh_tools *t = ops(c, name, out, &rc);
    if (rc)
        return rc;
    if (!t || !t->lock_servers)
        return notsup(c, "servers to name");
    if (max < 1)
        return dl_client_err(c, DLOCK_EINVAL, "lock servers: no room for any");
    memset(out, 0, (size_t)max * sizeof *out);
    return t->lock_servers(c, name, out, max);
}

/* ---- dlock check ------------------------------------------------------------ */

int dh_topology(dlock_client *c, dh_topo *out)
{
    int rc;
    const struct dh_tools *t = ops_of(c, out, &rc);
    if (rc)
        return rc;
    if (!t || !t->topology)
        return notsup(c, "deployment topology for dlock check");
    memset(out, 0, sizeof *out);
    rc = t->topology(c, out);
    if (rc == 0 && (out->quorum < 1 || out->trait == 0))
        return dl_client_err(c, DLOCK_EPROTO, "the %s backend's topology is incomplete",
                             c->be->name);
    return rc;
}

int dh_members(dlock_client *c, dh_member *out, int max)
{
    int rc;
    const struct dh_tools *t = ops_of(c, out, &rc);
    if (rc)
        return rc;
    if (!t || !t->members)
        return notsup(c, "list of its deployment's servers");
    if (max < 1)
        return dl_client_err(c, DLOCK_EINVAL, "members: no room for any");
    memset(out, 0, (size_t)max * sizeof *out);
    return t->members(c, out, max);
}

int dh_server_ready(dlock_client *c, const dh_member *m)
{
    int rc;
    const struct dh_tools *t = ops_of(c, m, &rc);
    if (rc)
        return rc;
    if (!t || !t->server_ready)
        return notsup(c, "readiness probe");
    return t->server_ready(c, m);
}

int dh_cut_replication(dlock_client *c, const dh_server *primary)
{
    int rc;
    const struct dh_tools *t = ops_of(c, primary, &rc);
    if (rc)
        return rc;
    if (!t || !t->cut_replication)
        return notsup(c, "replication to cut");
    return t->cut_replication(c, primary);
}

int dh_wait_failover(dlock_client *c, const char *name, const dh_server *old,
                     const dh_wait *w, dh_server *out)
{
    int rc;
    const struct dh_tools *t = ops(c, name, out, &rc);
    if (rc)
        return rc;
    if (!old || !w)
        return dl_client_err(c, DLOCK_EINVAL, "invalid argument");
    if (!t || !t->wait_failover)
        return notsup(c, "failover to wait for");
    memset(out, 0, sizeof *out);
    return t->wait_failover(c, name, old, w, out);
}

int dh_settle(dlock_client *c, const dh_member *m, int n,
              const dh_wait *w)
{
    int rc;
    const struct dh_tools *t = ops_of(c, m, &rc);
    if (rc)
        return rc;
    if (n < 1 || !w)
        return dl_client_err(c, DLOCK_EINVAL, "settle: no servers or no deadline");
    if (!t || !t->settle)
        return notsup(c, "way to tell its deployment settled");
    return t->settle(c, m, n, w);
}

int dh_leader(dlock_client *c, dh_server *out)
{
    int rc;
    const struct dh_tools *t = ops_of(c, out, &rc);
    if (rc)
        return rc;
    if (!t || !t->leader)
        return notsup(c, "ensemble leader to name");
    memset(out, 0, sizeof *out);
    return t->leader(c, out);
}

int dh_forget(dlock_client *c, const char *name)
{
    int rc;
    const struct dh_tools *t = ops(c, name, name, &rc);
    if (rc)
        return rc;
    if (!t || !t->forget)
        return notsup(c, "state of free names to remove");
    return t->forget(c, name);
}

/* Copy s into buf, or say which part did not fit. */
static int part(char *buf, size_t len, const char *s, const char *what, char *err, size_t errlen)
{
    size_t n = strlen(s ? s : "");
    if (n >= len) {
        snprintf(err, errlen, "the URL's %s is too long (%zu bytes, at most %zu)", what, n,
                 len - 1);
        return DLOCK_EURL;
    }
    memcpy(buf, s ? s : "", n + 1);
    return 0;
}

const char *dh_env_url(char *buf, size_t len)
{
    return dl_env_url(buf, len);
}

void dh_url_scrub(char *url)
{
    dl_url_scrub(url);
}

int dh_parse_url(const char *url, dh_url *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    dl_url *u = NULL;
    int rc = dl_url_parse(url ? url : "", &u, err, errlen);
    if (rc)
        return rc;
    if (u->nhosts > DH_URL_HOSTS) {
        snprintf(err, errlen, "%s: %zu hosts (at most %d here)", u->redacted, u->nhosts,
                 DH_URL_HOSTS);
        rc = DLOCK_EURL;
    }
    if (!rc)
        rc = part(out->scheme, sizeof out->scheme, u->scheme, "scheme", err, errlen);
    for (size_t i = 0; !rc && i < u->nhosts; i++) {
        rc = part(out->host[i].host, sizeof out->host[i].host, u->hosts[i].host, "host", err,
                  errlen);
        out->host[i].port = u->hosts[i].port;
        out->nhosts++;
    }
    if (!rc)
        rc = part(out->user, sizeof out->user, u->user, "user", err, errlen);
    if (!rc)
        rc = part(out->password, sizeof out->password, u->password, "password", err, errlen);
    if (!rc)
        rc = part(out->path, sizeof out->path, u->path, "path", err, errlen);
    dl_url_free(u);
    if (rc)
        explicit_bzero(out, sizeof *out);
    return rc;
}

/* ---- shared by the adapters ------------------------------------------ */

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Nearest rank: the smallest value with at least permille of them at or
 * below it (as the tools compute every percentile). */
static int64_t pct(const int64_t *sorted, size_t n, unsigned permille)
{
    if (n == 0)
        return 0;
    size_t rank = (size_t)(((unsigned long long)n * permille + 999) / 1000);
    rank = rank < 1 ? 1 : rank > n ? n : rank;
    return sorted[rank - 1];
}

void dh_summarize(int64_t *v, size_t n, dh_rtt *out)
{
    qsort(v, n, sizeof *v, cmp_i64);
    out->p50 = pct(v, n, 500);
    out->p99 = pct(v, n, 990);
    out->samples = n;
}

int dh_url_servers(dlock_client *c, const char *name, dh_server *out, int max)
{
    (void)name;
    int n = 0;
    for (size_t i = 0; i < c->url->nhosts && n < max; i++, n++) {
        snprintf(out[n].host, sizeof out[n].host, "%s", c->url->hosts[i].host);
        out[n].port = c->url->hosts[i].port;
    }
    return n;
}

int dh_url_members(dlock_client *c, dh_member *out, int max)
{
    dh_server s[DH_URL_HOSTS];
    int n = dh_url_servers(c, NULL, s, max < DH_URL_HOSTS ? max : DH_URL_HOSTS);
    for (int i = 0; i < n; i++)
        out[i] = (dh_member){.addr = s[i], .role = DH_DATA};
    return n;
}

int dh_url_topology(dlock_client *c, dh_topo *out)
{
    bool ensemble = c->url->nhosts > 1;
    out->trait = ensemble ? DH_TOPO_CONSENSUS : DH_TOPO_ONE_SERVER;
    out->quorum = ensemble ? (int)c->url->nhosts / 2 + 1 : 1;
    out->direct = 1;
    return 0;
}

int dh_one_server_topology(dlock_client *c, dh_topo *out)
{
    (void)c;
    out->trait = DH_TOPO_ONE_SERVER;
    out->quorum = 1;
    out->direct = 1;
    return 0;
}

int dh_settle_ensemble(dlock_client *c, const dh_member *m, int n,
                       const dh_wait *w)
{
    const struct dh_tools *t = dh_tools_for(c->be->name);
    for (;;) {
        int rc = 0;
        for (int i = 0; i < n && rc == 0; i++)
            rc = t->server_ready(c, &m[i]);
        dh_server lead;
        if (rc == 0 && (rc = t->leader(c, &lead)) == 0)
            return 0;
        if (w->stop && w->stop(w->arg))
            return dl_client_err(c, DLOCK_ECANCELED, "settling the ensemble: interrupted");
        if (dl_now_ns() >= w->until_ns)
            return dl_client_err(c, DLOCK_ETIMEDOUT, "the ensemble did not settle: %s",
                                 dlock_client_errmsg(c));
        struct timespec step = {0, 100 * 1000000};
        nanosleep(&step, NULL);
    }
}

int dh_repeat(int (*step)(void *arg, char *why, size_t wlen), void *arg, int iters,
              int warmup, int64_t max_ns, int64_t **v, size_t *n, char *why, size_t wlen)
{
    *n = 0;
    *v = malloc(sizeof **v * (size_t)(iters > 0 ? iters : 1));
    if (!*v) {
        snprintf(why, wlen, "out of memory");
        return DLOCK_ENOMEM;
    }
    int64_t stop = dl_now_ns() + max_ns;
    int rc = 0;
    for (int i = -warmup; rc == 0 && i < iters && dl_now_ns() < stop; i++) {
        int64_t t0 = dl_now_ns();
        rc = step(arg, why, wlen);
        if (rc == 0 && i >= 0)
            (*v)[(*n)++] = dl_now_ns() - t0;
    }
    return rc;
}

int dh_done(dlock_client *c, int rc, const char *tool, const char *why, int64_t *v,
            size_t n, dh_timing *out, const char *what)
{
    if (rc) {
        free(v);
        return dl_client_err(c, rc, "%s: %s (%s)", tool, why, c->url->redacted);
    }
    dh_summarize(v, n, &out->all);
    free(v);
    out->one = out->all;
    out->servers = 1;
    snprintf(out->what, sizeof out->what, "%s", what);
    return 0;
}

void dh_timeouts(dlock_client *c, int *connect_ms, int *op_ms)
{
    *connect_ms = c->opts.connect_timeout_ms;
    *op_ms = c->opts.op_timeout_ms;
}

void dh_renewal_stats(dlock_client *c, dh_renewals *out)
{
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&c->mu);
    out->renewed = c->renewed;
    out->calls = c->renew_calls;
    bool started = c->renew_started;
    pthread_mutex_unlock(&c->mu);
    clockid_t clk;
    struct timespec ts;
    /* The thread lives until the client closes: the caller holds it open. */
    if (started && pthread_getcpuclockid(c->renew_thread, &clk) == 0 &&
        clock_gettime(clk, &ts) == 0)
        out->cpu_ns = (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}
