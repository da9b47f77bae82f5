/* SPDX-License-Identifier: MIT */
/*
 * tools.c — the memcached backend's harness operations (src/harness/tools.h),
 * for dlock bench and dlock check: compiled into dlock_harness, not
 * libdlock.so.
 */
#include "mc_int.h"
#include "harness/tools.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

struct baseline_arg {
    mcclient *mc;
    mc_server *s;
};

static int baseline_step(void *arg, char *why, size_t wlen)
{
    struct baseline_arg *a = arg;
    mc_reply r;
    int64_t until = dl_deadline_in(a->mc->op_timeout_ms);
    int rc = mc_call(a->mc, a->s, "mn\r\n", 4, &r, 1, until, -1, why, wlen);
    if (!rc && strcmp(r.code, "MN") != 0) {
        snprintf(why, wlen, "mn answered %s", r.code);
        rc = DLOCK_EPROTO;
    }
    return rc;
}

/* The cheapest request: the meta no-op, on a kept connection to the
 * name's server. */
static int mc_tool_baseline(dlock_client *c, const char *name, int iters, int64_t max_ns,
                            dh_timing *out)
{
    mcclient *mc = mcc_of(c);
    struct baseline_arg a = {mc, mc_server_of(mc, name)};
    char why[400] = "";
    int64_t *v = NULL;
    size_t n = 0;
    int rc = dh_repeat(baseline_step, &a, iters, 20, max_ns, &v, &n, why, sizeof why);
    return dh_done(c, rc, "baseline", why, v, n, out, "meta no-op (mn) on a kept connection");
}

/* The requests the name's server has served, from its stats. */
static int mc_tool_counters(dlock_client *c, const char *name, dh_counters *out)
{
    mcclient *mc = mcc_of(c);
    mc_server *s = mc_server_of(mc, name);
    char why[400];
    mc_conn *k;
    bool reused;
    int64_t until = dl_deadline_in(mc->op_timeout_ms);
    int rc = mc_get_conn(mc, s, until, -1, &k, &reused, why, sizeof why);
    if (rc)
        return dl_client_err(c, rc, "counters: %s", why);
    int fd = k->fd;
    /* "stats" answers lines of STAT NAME VALUE and END: read to the END */
    char buf[16384];
    size_t have = 0;
    rc = send(fd, "stats\r\n", 7, MSG_NOSIGNAL) == 7 ? 0 : DLOCK_EUNREACHABLE;
    while (!rc && (have < 5 || !strstr(buf, "END\r\n"))) {
        if (have + 1 >= sizeof buf) {
            rc = DLOCK_EPROTO;
            break;
        }
        ssize_t n = recv(fd, buf + have, sizeof buf - 1 - have, 0);
        if (n > 0) {
            have += (size_t)n;
            buf[have] = '\0';
        } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
            rc = dl_wait_fd(fd, POLLIN, until, -1, NULL);
        } else {
            rc = DLOCK_EUNREACHABLE;
        }
    }
    if (rc) {
        mc_conn_close(k);
        return dl_client_err(c, rc, "counters: memcached %s:%d: no stats", s->host, s->port);
    }
    mc_put_conn(s, k);
    static const char *const names[] = {"cmd_get", "cmd_set", "cmd_touch", "delete_hits",
                                        "delete_misses", "incr_hits", "incr_misses"};
    for (size_t i = 0; i < sizeof names / sizeof names[0] && out->n < DH_COUNTERS_MAX;
         i++) {
        char pat[64];
        snprintf(pat, sizeof pat, "STAT %s ", names[i]);
        const char *p = strstr(buf, pat);
        uint64_t v = p ? strtoull(p + strlen(pat), NULL, 10) : 0;
        snprintf(out->name[out->n], sizeof out->name[0], "%s", names[i]);
        out->calls[out->n++] = v;
        out->client += v;
    }
    out->servers = 1;
    return 0;
}

static int mc_tool_lock_servers(dlock_client *c, const char *name, dh_server *out,
                                int max)
{
    if (max < 1)
        return 0;
    mc_server *s = mc_server_of(mcc_of(c), name);
    snprintf(out[0].host, sizeof out[0].host, "%s", s->host);
    out[0].port = s->port;
    return 1;
}

static int mc_tool_topology(dlock_client *c, dh_topo *out)
{
    out->trait = mcc_of(c)->nservers > 1 ? DH_TOPO_SHARDS : DH_TOPO_ONE_SERVER;
    out->quorum = 1;
    out->direct = 1;
    /* ttl_seconds: rounded up (< 1 s) and two more, on a clock of whole
     * seconds (< 1 s) */
    out->lease_slack_ms = 4000;
    return 0;
}

static int mc_tool_server_ready(dlock_client *c, const dh_member *m)
{
    mcclient *mc = mcc_of(c);
    for (size_t i = 0; i < mc->nservers; i++) {
        mc_server *s = &mc->servers[i];
        if (s->port != m->addr.port || strcmp(s->host, m->addr.host) != 0)
            continue;
        struct baseline_arg a = {mc, s};
        char why[400];
        int rc = baseline_step(&a, why, sizeof why);
        return rc ? dl_client_err(c, rc, "%s", why) : 0;
    }
    return dl_client_err(c, DLOCK_ENOENT, "%s:%d is not one of the URL's servers", m->addr.host,
                         m->addr.port);
}

const struct dh_tools dh_tools_memcached = {
    .baseline = mc_tool_baseline,
    .counters = mc_tool_counters,
    .lock_servers = mc_tool_lock_servers,
    .topology = mc_tool_topology,
    .members = dh_url_members,
    .server_ready = mc_tool_server_ready,
};
