/* SPDX-License-Identifier: MIT */
/*
 * tools.c — the Redis family's harness operations (src/harness/tools.h), for
 * `dlock bench` and `dlock check`: the PING round trip, the bare RPUSH ->
 * BLPOP hand-over, INFO commandstats, the servers that hold a lock, and
 * `dlock check`'s adapter: the deployment's topology and members (the
 * sentinels, the master and replicas they name, a cluster's nodes),
 * readiness, replication cut off, a Sentinel failover awaited, and the
 * deployment settled back after the faults.
 *
 * They are made of the family's own pieces: conn.c's connections (AUTH,
 * SELECT, deadlines, the bounded reply reader), the key of a name
 * (rd_lock_key, which encodes '}'), cluster.c's slot map and the checked
 * Sentinel reply (rd_addr_reply). Each call finds the servers from the
 * client's URL, credentials and timeouts, on connections of its own that
 * it closes before returning: a measurement never queues behind, nor
 * leaves anything in, the pools the client's locks use.
 */
#include "redis_cluster.h"
#include "redis_int.h"
#include "harness/tools.h"

#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define RT_MAX 64 /* servers of one target (Redlock masters) */
#define WARMUP_PINGS 200
#define RELAY_BLPOP_S "5"
#define RELAY_WAIT_MS 7000

enum { RT_SINGLE, RT_SENTINEL, RT_CLUSTER, RT_REDLOCK };

/* The servers that hold one name, found from the client's URL. */
typedef struct rtarget {
    int kind;
    rconf cf;
    rnode *own; /* nodes made here (master, Redlock masters) */
    int nown;
    rcluster *cluster;
    rnode *node[RT_MAX]; /* those holding the name */
    int n;
} rtarget;

static void rt_close(rtarget *t)
{
    for (int i = 0; i < t->nown; i++)
        rnode_destroy(&t->own[i]);
    free(t->own);
    if (t->cluster)
        rd_cluster_free(t->cluster);
    rd_conf_free(&t->cf);
    memset(t, 0, sizeof *t);
}

static int rt_fail(dlock_client *c, int code, const char *what, const char *err)
{
    return dl_client_err(c, code, "%s: %s (%s)", what, err, c->url->redacted);
}

/* Where sentinel host:port says master `name` is: RD_OK with its address,
 * or else with err. scf: the sentinels' settings (no credentials of the
 * data servers: sentinels have their own auth). */
static int ask_sentinel(const rconf *scf, const char *shost, int sport, const char *name,
                        char *host, size_t hostlen, int *port, char *err, size_t errlen)
{
    rnode s;
    rnode_init(&s, shost, sport);
    char e[256];
    rconn *cn = rconn_get(&s, scf, scf->connect_timeout_ms, NULL, e, sizeof e);
    redisReply *r = NULL;
    if (!cn) {
        snprintf(err, errlen, "%s", e);
    } else {
        rcmd cmd;
        rcmd_init(&cmd);
        rcmd_add(&cmd, "SENTINEL");
        rcmd_add(&cmd, "get-master-addr-by-name");
        rcmd_add(&cmd, name);
        if (rconn_call(cn, &cmd, 1, &r, scf->op_timeout_ms, -1, NULL, e, sizeof e) != RD_OK)
            snprintf(err, errlen, "sentinel %s:%d: %s", s.host, s.port, e);
        rconn_drop(cn);
    }
    bool ok = r && rd_addr_reply(r, host, hostlen, port) == 0;
    if (r && !ok) {
        rd_reply_desc(r, e, sizeof e);
        if (r->type == REDIS_REPLY_NIL)
            snprintf(err, errlen, "sentinel %s:%d does not know master \"%s\"", s.host, s.port,
                     name);
        else
            snprintf(err, errlen,
                     "sentinel %s:%d: master \"%s\": expected an array of {host, port}, got %s",
                     s.host, s.port, name, e);
    }
    if (r)
        freeReplyObject(r);
    rnode_destroy(&s);
    return ok ? RD_OK : RD_EIO;
}

/* The settings for talking to sentinels: cf without the data servers'
 * credentials and database. */
static rconf sentinel_conf(const rconf *cf)
{
    rconf scf = *cf;
    scf.user = scf.password = NULL;
    scf.db = 0;
    return scf;
}

/* Where Sentinel says the master is: the first sentinel that answers. */
static int sentinel_master(const rtarget *t, const dl_url *u, char *host, size_t hostlen,
                           int *port, char *err, size_t errlen)
{
    rconf scf = sentinel_conf(&t->cf);
    snprintf(err, errlen, "no sentinel answered");
    for (size_t i = 0; i < u->nhosts; i++)
        if (ask_sentinel(&scf, u->hosts[i].host, u->hosts[i].port, u->path, host, hostlen, port,
                         err, errlen) == RD_OK)
            return 0;
    return -1;
}

static int kind_of(const dl_url *u)
{
    return strcmp(u->scheme, "redis+sentinel") == 0  ? RT_SENTINEL
           : strcmp(u->scheme, "redis+cluster") == 0 ? RT_CLUSTER
           : strcmp(u->scheme, "redlock") == 0       ? RT_REDLOCK
                                                     : RT_SINGLE;
}

/* The servers holding name: 0, or a DLOCK_E* code set on c (what: for the
 * message). With seeds, a cluster's are the nodes its URL lists, and no
 * CLUSTER SLOTS is sent (it would count among the commands counted). */
static int rt_open(dlock_client *c, const char *name, rtarget *t, const char *what, bool seeds)
{
    const dl_url *u = c->url;
    memset(t, 0, sizeof *t);
    t->kind = kind_of(u);
    if (rd_conf_init(&t->cf, u, &c->opts) != 0)
        return dl_client_err(c, DLOCK_ENOMEM, "out of memory");
    if ((t->kind == RT_SINGLE || t->kind == RT_REDLOCK) && u->path && *u->path)
        t->cf.db = atoi(u->path); /* as the backends read it */
    char err[768];
    int rc = 0;
    switch (seeds && t->kind == RT_CLUSTER ? RT_REDLOCK : t->kind) {
    case RT_SINGLE:
    case RT_REDLOCK: {
        int n = t->kind == RT_SINGLE ? 1 : (int)u->nhosts;
        if (n > RT_MAX) {
            rt_close(t);
            return dl_client_err(c, DLOCK_ENOTSUP, "%s: more than %d servers (%s)", what,
                                 RT_MAX, u->redacted);
        }
        t->own = calloc((size_t)n, sizeof *t->own);
        if (!t->own) {
            rc = dl_client_err(c, DLOCK_ENOMEM, "out of memory");
            break;
        }
        for (int i = 0; i < n; i++) {
            rnode_init(&t->own[i], u->hosts[i].host, u->hosts[i].port);
            t->node[i] = &t->own[i];
        }
        t->nown = t->n = n;
        break;
    }
    case RT_SENTINEL: {
        char host[256];
        int port;
        if (sentinel_master(t, u, host, sizeof host, &port, err, sizeof err) != 0) {
            rc = rt_fail(c, DLOCK_EUNREACHABLE, what, err);
            break;
        }
        t->own = calloc(1, sizeof *t->own);
        if (!t->own) {
            rc = dl_client_err(c, DLOCK_ENOMEM, "out of memory");
            break;
        }
        rnode_init(&t->own[0], host, port);
        t->node[0] = &t->own[0];
        t->nown = t->n = 1;
        break;
    }
    case RT_CLUSTER: {
        rd_key key;
        if (rd_lock_key(name, key, sizeof key) != 0) {
            rc = dl_client_err(c, DLOCK_ENAME, "%s: name \"%s\" too long for a key", what, name);
            break;
        }
        t->cluster = rd_cluster_new(u->hosts, u->nhosts);
        if (!t->cluster) {
            rc = dl_client_err(c, DLOCK_ENOMEM, "out of memory");
            break;
        }
        if (rd_cluster_refresh(t->cluster, &t->cf, NULL, err, sizeof err) != RD_OK) {
            rc = rt_fail(c, DLOCK_EUNREACHABLE, what, err);
            break;
        }
        t->node[0] = rd_cluster_node(t->cluster, key);
        if (!t->node[0]) {
            rc = dl_client_err(c, DLOCK_EUNREACHABLE, "%s: no node serves the slot of \"%s\" (%s)",
                               what, name, u->redacted);
            break;
        }
        t->n = 1;
        break;
    }
    }
    if (rc)
        rt_close(t);
    return rc;
}

/* A connection to each server of t into cs[0..n): 0, or a code set on c. */
static int rt_connect(dlock_client *c, rtarget *t, rconn **cs, const char *what)
{
    for (int i = 0; i < t->n; i++)
        cs[i] = NULL;
    for (int i = 0; i < t->n; i++) {
        char err[300];
        int fail;
        cs[i] = rconn_get(t->node[i], &t->cf, t->cf.connect_timeout_ms, &fail, err, sizeof err);
        if (!cs[i]) {
            for (int k = 0; k < i; k++)
                rconn_drop(cs[k]);
            return rt_fail(c, fail, what, err);
        }
    }
    return 0;
}

/* ---- the round trip ------------------------------------------------------ */

/*
 * PING on every connection at once (written to all before any reply is
 * read, as a Redlock request is), until iters samples or max_ns: each
 * sample is the time until the last reply. The same code path as the lock's
 * own requests (rconn_call, rconn_call_many), so the ratio of the two is
 * what the lock adds. RD_OK, or RD_EIO with err.
 */
static int ping_samples(const rtarget *t, rconn **cs, int n, int iters, int64_t max_ns,
                        dh_rtt *out, char *err, size_t errlen)
{
    int64_t *v = malloc((size_t)iters * sizeof *v);
    if (!v) {
        snprintf(err, errlen, "out of memory");
        return RD_EIO;
    }
    rcmd ping;
    rcmd_init(&ping);
    rcmd_add(&ping, "PING");
    int k = 0, rc = RD_OK;
    int64_t stop = dl_now_ns() + max_ns;
    while (rc == RD_OK && k < iters && dl_now_ns() < stop) {
        redisReply *r[n];
        int st[n];
        int64_t t0 = dl_now_ns();
        if (n == 1) {
            rc = rconn_call(cs[0], &ping, 1, r, t->cf.op_timeout_ms, -1, NULL, err, errlen);
            st[0] = rc;
        } else {
            rconn_call_many(cs, n, &ping, 1, r, st, t->cf.op_timeout_ms, NULL, NULL);
        }
        int64_t t1 = dl_now_ns();
        for (int i = 0; i < n; i++) {
            if (st[i] != RD_OK) {
                if (rc == RD_OK)
                    snprintf(err, errlen, "redis %s:%d: no reply to PING", cs[i]->node->host,
                             cs[i]->node->port);
                rc = RD_EIO;
                continue;
            }
            if (r[i]->type == REDIS_REPLY_ERROR && rc == RD_OK) {
                char got[160];
                rd_reply_desc(r[i], got, sizeof got);
                snprintf(err, errlen, "redis %s:%d: PING: %s", cs[i]->node->host,
                         cs[i]->node->port, got);
                rc = RD_EPROTO;
            }
            freeReplyObject(r[i]);
        }
        if (rc == RD_OK)
            v[k++] = t1 - t0;
    }
    if (rc == RD_OK)
        dh_summarize(v, (size_t)k, out);
    free(v);
    return rc;
}

static int rd_tool_baseline(dlock_client *c, const char *name, int iters, int64_t max_ns,
                            dh_timing *out)
{
    rtarget t;
    int rc = rt_open(c, name, &t, "baseline", false);
    if (rc)
        return rc;
    rconn *cs[RT_MAX];
    rc = rt_connect(c, &t, cs, "baseline");
    if (rc) {
        rt_close(&t);
        return rc;
    }
    char err[1024] = "";
    dh_rtt warm;
    /* warm up the connections and the server's path */
    int x = ping_samples(&t, cs, t.n, WARMUP_PINGS, max_ns, &warm, err, sizeof err);
    if (x == RD_OK)
        x = ping_samples(&t, cs, t.n, iters, max_ns, &out->all, err, sizeof err);
    if (x == RD_OK && t.n > 1)
        x = ping_samples(&t, cs, 1, iters, max_ns, &out->one, err, sizeof err);
    else if (x == RD_OK)
        out->one = out->all;
    for (int i = 0; i < t.n; i++)
        rconn_drop(cs[i]);
    out->servers = t.n;
    const rnode *m = t.node[0];
    switch (t.kind) {
    case RT_REDLOCK:
        snprintf(out->what, sizeof out->what,
                 "PING to all %d masters in parallel (time to the last reply); rtt_single: "
                 "PING to %.100s:%d alone",
                 t.n, m->host, m->port);
        break;
    case RT_CLUSTER:
        snprintf(out->what, sizeof out->what,
                 "PING on one connection to %.100s:%d, the node of the lock's slot", m->host,
                 m->port);
        break;
    case RT_SENTINEL:
        snprintf(out->what, sizeof out->what,
                 "PING on one connection to the master %.100s:%d (from Sentinel)", m->host,
                 m->port);
        break;
    default:
        snprintf(out->what, sizeof out->what, "PING on one connection to the master %.100s:%d",
                 m->host, m->port);
        break;
    }
    rt_close(&t);
    if (x != RD_OK)
        return rt_fail(c, x == RD_EPROTO ? DLOCK_EPROTO : DLOCK_EUNREACHABLE, "baseline", err);
    return 0;
}

/* ---- relay: the bare hand-over the server offers -------------------------- */

/*
 * A lock hand-over is a one-way chain: the holder's request wakes the server,
 * whose reply wakes another process. The relay measures the same chain with
 * nothing of the lock in it: thread B blocks in BLPOP, A pushes one element
 * (RPUSH), and the sample is from just before A's request to B's wake-up.
 * The lock's hand-over divided by it is what the lock itself adds.
 */
typedef struct relay {
    rconn *b;
    const char *key;
    int iters;
    int64_t *woke;    /* per round, when B had its reply */
    _Atomic int sent; /* rounds whose BLPOP B is sending */
    _Atomic int failed;
} relay;

static void *relay_b(void *arg)
{
    relay *rl = arg;
    rcmd cmd;
    rcmd_init(&cmd);
    rcmd_add(&cmd, "BLPOP");
    rcmd_add(&cmd, rl->key);
    rcmd_add(&cmd, RELAY_BLPOP_S);
    for (int i = 0; i < rl->iters; i++) {
        redisReply *r;
        char err[256];
        /* A gives the request a millisecond to reach the server. */
        atomic_store(&rl->sent, i + 1);
        if (rconn_call(rl->b, &cmd, 1, &r, RELAY_WAIT_MS, -1, NULL, err, sizeof err) != RD_OK) {
            atomic_store(&rl->failed, 1);
            break;
        }
        rl->woke[i] = dl_now_ns();
        bool popped = r->type == REDIS_REPLY_ARRAY;
        freeReplyObject(r);
        if (!popped) {
            atomic_store(&rl->failed, 1);
            break;
        }
    }
    return NULL;
}

static void sleep_ns(int64_t ns)
{
    struct timespec ts = {.tv_sec = ns / 1000000000LL, .tv_nsec = ns % 1000000000LL};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

static int rd_tool_relay(dlock_client *c, const char *name, int iters, dh_timing *out)
{
    rtarget t;
    int rc = rt_open(c, name, &t, "relay", false);
    if (rc)
        return rc;
    rd_key key;
    if (rd_name_key(name, "tool-relay", key, sizeof key) != 0) { /* the lock's slot */
        rt_close(&t);
        return dl_client_err(c, DLOCK_ENAME, "relay: name \"%s\" too long for a key", name);
    }
    rnode *node = t.node[0];
    char err[1024] = "";
    int fail = DLOCK_EUNREACHABLE;
    rconn *a = rconn_get(node, &t.cf, t.cf.connect_timeout_ms, &fail, err, sizeof err);
    rconn *b = a ? rconn_get(node, &t.cf, t.cf.connect_timeout_ms, &fail, err, sizeof err) : NULL;
    int64_t *sent_at = calloc((size_t)iters, sizeof *sent_at);
    int64_t *woke = calloc((size_t)iters, sizeof *woke);
    int x = a && b ? RD_OK : RD_EIO;
    if (x == RD_OK && (!sent_at || !woke)) {
        snprintf(err, sizeof err, "out of memory");
        fail = DLOCK_ENOMEM;
        x = RD_EIO;
    }
    relay rl = {.b = b, .key = key, .iters = iters, .woke = woke};
    pthread_t th;
    bool started = x == RD_OK && pthread_create(&th, NULL, relay_b, &rl) == 0;
    if (x == RD_OK && !started) {
        snprintf(err, sizeof err, "cannot start a thread");
        fail = DLOCK_EIO;
        x = RD_EIO;
    }
    rcmd push;
    rcmd_init(&push);
    rcmd_add(&push, "RPUSH");
    rcmd_add(&push, key);
    rcmd_add(&push, "1");
    for (int k = 0; x == RD_OK && k < iters; k++) {
        /* B's BLPOP on its way, and given a millisecond to reach the server */
        while (atomic_load(&rl.sent) <= k && !atomic_load(&rl.failed))
            sleep_ns(100000);
        if (atomic_load(&rl.failed))
            break;
        sleep_ns(1000000);
        sent_at[k] = dl_now_ns();
        redisReply *r;
        x = rconn_call(a, &push, 1, &r, t.cf.op_timeout_ms, -1, NULL, err, sizeof err);
        if (x == RD_OK) {
            if (r->type != REDIS_REPLY_INTEGER) {
                char got[160];
                rd_reply_desc(r, got, sizeof got);
                snprintf(err, sizeof err, "redis %s:%d: RPUSH: expected an integer, got %s",
                         node->host, node->port, got);
                fail = DLOCK_EPROTO;
                x = RD_EPROTO;
            }
            freeReplyObject(r);
        } else {
            rconn_drop(a);
            a = NULL;
        }
    }
    if (started) {
        if (x != RD_OK || atomic_load(&rl.failed))
            shutdown(b->ctx->fd, SHUT_RDWR); /* end a BLPOP that will not be served */
        pthread_join(th, NULL);
    }
    if (x == RD_OK && atomic_load(&rl.failed)) {
        snprintf(err, sizeof err, "redis %s:%d: BLPOP failed", node->host, node->port);
        x = RD_EIO;
    }
    if (x == RD_OK) {
        for (int i = 0; i < iters; i++)
            sent_at[i] = woke[i] - sent_at[i];
        dh_summarize(sent_at, (size_t)iters, &out->all);
        out->one = out->all;
        out->servers = 1;
        snprintf(out->what, sizeof out->what, "RPUSH waking a BLPOP");
    }
    if (a) {
        rcmd del;
        rcmd_init(&del);
        rcmd_add(&del, "DEL");
        rcmd_add(&del, key);
        redisReply *r;
        char e[256];
        if (rconn_call(a, &del, 1, &r, t.cf.op_timeout_ms, -1, NULL, e, sizeof e) == RD_OK)
            freeReplyObject(r);
        rconn_drop(a);
    }
    rconn_drop(b);
    free(sent_at);
    free(woke);
    rt_close(&t);
    if (x != RD_OK)
        return rt_fail(c, fail, "relay", err);
    return 0;
}

/* ---- INFO commandstats ----------------------------------------------------- */

/* Commands a dlock client sends itself; the rest of what commandstats
 * counts is called from inside the lock script. */
static const char *const client_cmds[] = {
    "fcall", "fcall_ro", "function", "evalsha", "eval",  "evalsha_ro", "eval_ro", "blpop",
    "script", "wait",    "scan",     "asking",  "select", "auth",      "hello",   "cluster",
    "readonly", NULL};

static bool is_client_cmd(const char *name, size_t len)
{
    for (size_t i = 0; client_cmds[i]; i++)
        if (strlen(client_cmds[i]) == len && strncasecmp(client_cmds[i], name, len) == 0)
            return true;
    return false;
}

static void stats_add(dh_counters *s, const char *name, size_t len, uint64_t calls)
{
    if (len >= sizeof s->name[0])
        len = sizeof s->name[0] - 1;
    for (int i = 0; i < s->n; i++)
        if (strlen(s->name[i]) == len && strncmp(s->name[i], name, len) == 0) {
            s->calls[i] += calls;
            return;
        }
    if (s->n < DH_COUNTERS_MAX) {
        memcpy(s->name[s->n], name, len);
        s->name[s->n][len] = '\0';
        s->calls[s->n++] = calls;
    }
}

typedef struct count_ctx {
    const rtarget *t;
    dh_counters *out;
    int fail;
    char err[1024];
} count_ctx;

/* Add one server's INFO commandstats: cmdstat_NAME[|SUB]:calls=N,usec=... */
static int count_node(rnode *node, void *arg)
{
    count_ctx *cc = arg;
    char e[300];
    int fail;
    rconn *cn = rconn_get(node, &cc->t->cf, cc->t->cf.connect_timeout_ms, &fail, e, sizeof e);
    if (!cn) {
        cc->fail = fail;
        snprintf(cc->err, sizeof cc->err, "%s", e);
        return -1;
    }
    rcmd cmd;
    rcmd_init(&cmd);
    rcmd_add(&cmd, "INFO");
    rcmd_add(&cmd, "commandstats");
    redisReply *r;
    if (rconn_call(cn, &cmd, 1, &r, cc->t->cf.op_timeout_ms, -1, NULL, e, sizeof e) != RD_OK) {
        rconn_drop(cn);
        cc->fail = DLOCK_EUNREACHABLE;
        snprintf(cc->err, sizeof cc->err, "redis %s:%d: INFO commandstats: %s", node->host,
                 node->port, e);
        return -1;
    }
    rconn_drop(cn);
    bool text = r->type == REDIS_REPLY_STRING;
#ifdef REDIS_REPLY_VERB
    text = text || r->type == REDIS_REPLY_VERB;
#endif
    char *copy = text ? malloc(r->len + 1) : NULL;
    if (!copy) {
        rd_reply_desc(r, e, sizeof e);
        cc->fail = text ? DLOCK_ENOMEM : DLOCK_EPROTO;
        snprintf(cc->err, sizeof cc->err, "redis %s:%d: INFO commandstats: expected text, got %s",
                 node->host, node->port, text ? "too much" : e);
        freeReplyObject(r);
        return -1;
    }
    memcpy(copy, r->str, r->len);
    copy[r->len] = '\0';
    freeReplyObject(r);
    dh_counters *out = cc->out;
    char *save = NULL;
    for (char *line = strtok_r(copy, "\r\n", &save); line; line = strtok_r(NULL, "\r\n", &save)) {
        if (strncmp(line, "cmdstat_", 8) != 0)
            continue;
        char *name = line + 8, *colon = strchr(name, ':');
        char *calls = colon ? strstr(colon, "calls=") : NULL;
        if (!calls)
            continue;
        size_t base = strcspn(name, "|:");
        uint64_t k = strtoull(calls + 6, NULL, 10);
        if (base == 4 && strncasecmp(name, "info", 4) == 0)
            continue; /* our own */
        if (is_client_cmd(name, base)) {
            out->client += k;
            stats_add(out, name, base, k);
        } else {
            out->internal += k;
        }
    }
    free(copy);
    out->servers++;
    return 0;
}

static int rd_tool_counters(dlock_client *c, const char *name, dh_counters *out)
{
    rtarget t;
    /* A cluster's names spread over every slot: every node of the URL
     * counts (asking the cluster for its masters would add a CLUSTER SLOTS
     * of ours to the count). */
    int rc = rt_open(c, name, &t, "command counters", true);
    if (rc)
        return rc;
    count_ctx cc = {.t = &t, .out = out};
    int x = 0;
    for (int i = 0; i < t.n && x == 0; i++)
        x = count_node(t.node[i], &cc);
    rt_close(&t);
    if (x)
        return rt_fail(c, cc.fail, "command counters", cc.err);
    return 0;
}

/* ---- the servers of a lock --------------------------------------------------- */

static int rd_tool_lock_servers(dlock_client *c, const char *name, dh_server *out,
                                int max)
{
    rtarget t;
    int rc = rt_open(c, name, &t, "lock servers", false);
    if (rc)
        return rc;
    int n = t.n < max ? t.n : max;
    for (int i = 0; i < n; i++) {
        snprintf(out[i].host, sizeof out[i].host, "%s", t.node[i]->host);
        out[i].port = t.node[i]->port;
    }
    rt_close(&t);
    return n;
}

/* ---- dlock check: the deployment and its faults --------------------------- */

#define CTL_MAX 64               /* servers of one deployment */
#define FAILOVER_POLL_NS 20000000LL
#define SETTLE_POLL_NS 100000000LL
#define REPOINT_NS 10000000000LL /* a replica told whom to follow gets this long to sync */

/* Text a program can read: a string (or RESP3 verbatim) without NUL bytes. */
static bool text_reply(const redisReply *r)
{
    bool text = r && r->str && r->type == REDIS_REPLY_STRING;
#ifdef REDIS_REPLY_VERB
    text = text || (r && r->str && r->type == REDIS_REPLY_VERB);
#endif
    return text && memchr(r->str, '\0', r->len) == NULL;
}

static bool pairs_reply(const redisReply *r)
{
    bool pairs = r && r->type == REDIS_REPLY_ARRAY;
#ifdef REDIS_REPLY_MAP
    pairs = pairs || (r && r->type == REDIS_REPLY_MAP);
#endif
    return pairs;
}

/* The value of field `name` in a reply of name/value pairs (SENTINEL master,
 * an element of SENTINEL replicas), "" when absent or not text. */
static const char *field(const redisReply *kv, const char *name)
{
    for (size_t f = 0; pairs_reply(kv) && f + 1 < kv->elements; f += 2)
        if (text_reply(kv->element[f]) && strcmp(kv->element[f]->str, name) == 0 &&
            text_reply(kv->element[f + 1]))
            return kv->element[f + 1]->str;
    return "";
}

static bool loopback(const char *host)
{
    return strcmp(host, "127.0.0.1") == 0 || strcasecmp(host, "localhost") == 0 ||
           strcmp(host, "::1") == 0;
}

/* The same server, however its host is spelled on this machine. */
static bool same_server(const char *h1, int p1, const char *h2, int p2)
{
    return p1 == p2 && (strcasecmp(h1, h2) == 0 || (loopback(h1) && loopback(h2)));
}

/* The settings of control connections: the URL's credentials for data
 * servers (none for sentinels: they have their own), never a SELECT
 * (nothing here depends on the database, and a cluster node has only one).
 * 0, or a code set on c. */
static int ctl_conf(dlock_client *c, rconf *cf)
{
    if (rd_conf_init(cf, c->url, &c->opts) != 0)
        return dl_client_err(c, DLOCK_ENOMEM, "out of memory");
    cf->db = 0;
    return 0;
}

/* One command on host:port, on a connection of its own: RD_OK with the
 * reply (caller frees), or else with err. */
static int ctl_call(const rconf *cf, const char *host, int port, const rcmd *cmd,
                    redisReply **r, char *err, size_t errlen)
{
    rnode n;
    rnode_init(&n, host, port);
    int x = RD_EIO;
    rconn *cn = rconn_get(&n, cf, cf->connect_timeout_ms, NULL, err, errlen);
    if (cn) {
        x = rconn_call(cn, cmd, 1, r, cf->op_timeout_ms, -1, NULL, err, errlen);
        rconn_drop(cn);
    }
    rnode_destroy(&n);
    return x;
}

/* The same for a command of up to three words; the reply or NULL. */
static redisReply *ctl_cmd(const rconf *cf, const char *host, int port, const char *a0,
                           const char *a1, const char *a2)
{
    rcmd cmd;
    rcmd_init(&cmd);
    rcmd_add(&cmd, a0);
    if (a1)
        rcmd_add(&cmd, a1);
    if (a2)
        rcmd_add(&cmd, a2);
    redisReply *r = NULL;
    char err[256];
    return ctl_call(cf, host, port, &cmd, &r, err, sizeof err) == RD_OK ? r : NULL;
}

/* INFO section of host:port as text (caller frees), or NULL. */
static char *ctl_info(const rconf *cf, const char *host, int port, const char *section)
{
    redisReply *r = ctl_cmd(cf, host, port, "INFO", section, NULL);
    char *out = text_reply(r) ? strdup(r->str) : NULL;
    if (r)
        freeReplyObject(r);
    return out;
}

/* ROLE of host:port: "master", "slave", "sentinel", or "" when it does not
 * answer as one of them; a replica's master port in *master_port (else 0). */
static void ctl_role(const rconf *cf, const char *host, int port, char *role, size_t len,
                     int *master_port)
{
    redisReply *r = ctl_cmd(cf, host, port, "ROLE", NULL, NULL);
    role[0] = '\0';
    *master_port = 0;
    if (r && r->type == REDIS_REPLY_ARRAY && r->elements >= 1 && text_reply(r->element[0])) {
        snprintf(role, len, "%s", r->element[0]->str);
        if (strcmp(role, "slave") == 0 && r->elements >= 3 &&
            r->element[2]->type == REDIS_REPLY_INTEGER)
            *master_port = (int)r->element[2]->integer;
    }
    if (r)
        freeReplyObject(r);
}

static const char *role_words(int role)
{
    return role == DH_COORDINATOR ? "sentinel" : "redis";
}

static int rd_tool_topology(dlock_client *c, dh_topo *out)
{
    out->quorum = 1;
    switch (kind_of(c->url)) {
    case RT_SENTINEL:
        out->trait = DH_TOPO_REPLICAS_FAILOVER;
        snprintf(out->indirect, sizeof out->indirect,
                 "Sentinel tells its clients the master's own address, which would lead the "
                 "workers around their relays (use redis:// or redlock://)");
        break;
    case RT_CLUSTER:
        out->trait = DH_TOPO_SHARDS;
        snprintf(out->indirect, sizeof out->indirect,
                 "a cluster's redirections (MOVED, CLUSTER SLOTS) name its nodes' own ports, "
                 "which would lead the workers around their relays (use redis:// or "
                 "redlock://)");
        break;
    case RT_REDLOCK:
        out->trait = DH_TOPO_QUORUM;
        out->quorum = (int)c->url->nhosts / 2 + 1;
        out->direct = 1;
        break;
    default:
        out->trait = DH_TOPO_ONE_SERVER;
        out->direct = 1;
        break;
    }
    return 0;
}

/* Add host:port to out[0..*n) unless it is there (or out is full: the
 * caller's room is its limit). */
static void add_member(dh_member *out, int *n, int max, const char *host, int port,
                       int role)
{
    for (int i = 0; i < *n; i++)
        if (same_server(out[i].addr.host, out[i].addr.port, host, port))
            return;
    if (*n >= max || port <= 0 || !*host)
        return;
    snprintf(out[*n].addr.host, sizeof out[*n].addr.host, "%s", host);
    out[*n].addr.port = port;
    out[*n].role = role;
    (*n)++;
}

/* The master a sentinel names and the replicas it knows. */
static int sentinel_members(dlock_client *c, const rconf *cf, dh_member *out, int *n,
                            int max)
{
    const dl_url *u = c->url;
    rconf scf = sentinel_conf(cf);
    char err[300] = "no sentinel answered";
    for (size_t i = 0; i < u->nhosts; i++) {
        char host[256];
        int port;
        if (ask_sentinel(&scf, u->hosts[i].host, u->hosts[i].port, u->path, host, sizeof host,
                         &port, err, sizeof err) != RD_OK)
            continue;
        add_member(out, n, max, host, port, DH_DATA);
        redisReply *r =
            ctl_cmd(&scf, u->hosts[i].host, u->hosts[i].port, "SENTINEL", "replicas", u->path);
        for (size_t k = 0; r && r->type == REDIS_REPLY_ARRAY && k < r->elements; k++) {
            const redisReply *kv = r->element[k];
            add_member(out, n, max, field(kv, "ip"), atoi(field(kv, "port")), DH_DATA);
        }
        if (r)
            freeReplyObject(r);
        return 0;
    }
    return dl_client_err(c, DLOCK_EUNREACHABLE,
                         "no sentinel of the URL names a master \"%s\": %s (%s)", u->path, err,
                         u->redacted);
}

/* Every node CLUSTER NODES lists: "<id> <ip>:<port>@<cport>[,<hostname>]
 * <flags> ..." a line, from the first seed that answers. */
static int cluster_members(dlock_client *c, const rconf *cf, dh_member *out, int *n,
                           int max)
{
    const dl_url *u = c->url;
    for (size_t i = 0; i < u->nhosts; i++) {
        redisReply *r = ctl_cmd(cf, u->hosts[i].host, u->hosts[i].port, "CLUSTER", "NODES", NULL);
        bool ok = text_reply(r);
        for (char *p = ok ? r->str : NULL; p && *p;) {
            char *eol = strchr(p, '\n');
            char *addr = strchr(p, ' ');
            if (addr && (!eol || addr < eol)) {
                addr++;
                size_t hl = strcspn(addr, " \n");
                char host[256];
                /* the port after the last ':' before '@' (an IPv6 address has
                 * colons of its own) */
                char *at = memchr(addr, '@', hl);
                char *colon = NULL;
                for (char *q = addr; q < (at ? at : addr + hl); q++)
                    if (*q == ':')
                        colon = q;
                if (colon && (size_t)(colon - addr) < sizeof host) {
                    memcpy(host, addr, (size_t)(colon - addr));
                    host[colon - addr] = '\0';
                    add_member(out, n, max, host, atoi(colon + 1), DH_DATA);
                }
            }
            p = eol ? eol + 1 : NULL;
        }
        if (r)
            freeReplyObject(r);
        if (ok)
            return 0;
    }
    return dl_client_err(c, DLOCK_EUNREACHABLE, "no seed node answered CLUSTER NODES (%s)",
                         u->redacted);
}

static int rd_tool_members(dlock_client *c, dh_member *out, int max)
{
    const dl_url *u = c->url;
    int kind = kind_of(u), n = 0;
    /* the URL's hosts: sentinels, or data servers (seeds of a cluster) */
    size_t nurl = kind == RT_SINGLE ? 1 : u->nhosts;
    for (size_t i = 0; i < nurl; i++)
        add_member(out, &n, max, u->hosts[i].host, u->hosts[i].port,
                   kind == RT_SENTINEL ? DH_COORDINATOR : DH_DATA);
    if (kind != RT_SENTINEL && kind != RT_CLUSTER)
        return n;
    rconf cf;
    int rc = ctl_conf(c, &cf);
    if (rc)
        return rc;
    rc = kind == RT_SENTINEL ? sentinel_members(c, &cf, out, &n, max)
                             : cluster_members(c, &cf, out, &n, max);
    rd_conf_free(&cf);
    return rc ? rc : n;
}

/* Any reply to PING but LOADING: an error like NOAUTH still answers. */
static int ready(const rconf *cf, const dh_member *m, char *why, size_t whylen)
{
    rconf scf = sentinel_conf(cf);
    redisReply *r = ctl_cmd(m->role == DH_COORDINATOR ? &scf : cf, m->addr.host,
                            m->addr.port, "PING", NULL, NULL);
    int rc = r ? 0 : DLOCK_EUNREACHABLE;
    if (r && r->type == REDIS_REPLY_ERROR && r->str && strncmp(r->str, "LOADING", 7) == 0)
        rc = DLOCK_EBUSY;
    if (r)
        freeReplyObject(r);
    if (rc)
        snprintf(why, whylen, "%s %s:%d %s", role_words(m->role), m->addr.host, m->addr.port,
                 rc == DLOCK_EBUSY ? "is loading its data" : "does not answer");
    return rc;
}

static int rd_tool_server_ready(dlock_client *c, const dh_member *m)
{
    rconf cf;
    int rc = ctl_conf(c, &cf);
    if (rc)
        return rc;
    char why[400];
    rc = ready(&cf, m, why, sizeof why);
    rd_conf_free(&cf);
    return rc ? dl_client_err(c, rc, "%s", why) : 0;
}

/* A TCP port of the loopback interface that nobody listens on now, below
 * the kernel's ephemeral range: a replica reconnecting over and over to a
 * port in that range can be given it as its own local port and connect to
 * itself (TCP simultaneous open). -1 if none was found. */
static int dead_port(void)
{
    int low = 32768;
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "re");
    if (f) {
        if (fscanf(f, "%d", &low) != 1 || low <= 2048)
            low = 32768;
        fclose(f);
    }
    unsigned seed = (unsigned)dl_now_ns() ^ (unsigned)getpid();
    for (int tries = 0; tries < 100; tries++) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
            return -1;
        int port = 1024 + (int)(rand_r(&seed) % (unsigned)(low - 1024));
        struct sockaddr_in a = {.sin_family = AF_INET,
                                .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
                                .sin_port = htons((uint16_t)port)};
        int ok = bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
        close(fd);
        if (ok)
            return port;
    }
    return -1;
}

/*
 * Every replica the master reports (INFO replication: slaveN:ip=..,port=..)
 * is made to replicate from a port where nothing listens. It keeps its data
 * and falls behind; the sentinels still see it alive and eligible for
 * promotion, and do not fix its configuration while the master looks sane
 * for failover-timeout. A CONFIG SET of the master's replica output
 * buffers, or killing the replication connections, does not do this: the
 * data is sent before the link is closed, or resent by partial
 * resynchronisation a second later.
 */
static int rd_tool_cut_replication(dlock_client *c, const dh_server *primary)
{
    if (kind_of(c->url) != RT_SENTINEL)
        return dl_client_err(c, DLOCK_ENOTSUP, "%s has no replicas to cut off",
                             c->url->redacted);
    rconf cf;
    int rc = ctl_conf(c, &cf);
    if (rc)
        return rc;
    char *text = ctl_info(&cf, primary->host, primary->port, "replication");
    int port = text ? dead_port() : -1;
    char pb[16];
    snprintf(pb, sizeof pb, "%d", port);
    int cut = 0;
    for (char *p = text; port > 0 && (p = strstr(p, "slave")) != NULL; p++) {
        if (p[5] < '0' || p[5] > '9')
            continue;
        char *eol = strchr(p, '\n');
        char *ip = strstr(p, "ip="), *pp = strstr(p, "port=");
        if (!ip || !pp || (eol && (ip > eol || pp > eol)))
            continue;
        char host[256];
        size_t hl = strcspn(ip + 3, ",\r\n");
        if (hl == 0 || hl >= sizeof host)
            continue;
        memcpy(host, ip + 3, hl);
        host[hl] = '\0';
        /* the dead port is on this machine's loopback interface, as the
         * deployments dlock check faults are */
        redisReply *r = ctl_cmd(&cf, host, atoi(pp + 5), "REPLICAOF", "127.0.0.1", pb);
        if (r && r->type != REDIS_REPLY_ERROR)
            cut++;
        if (r)
            freeReplyObject(r);
    }
    rd_conf_free(&cf);
    if (!text)
        return dl_client_err(c, DLOCK_EUNREACHABLE, "redis %s:%d: no answer to INFO replication",
                             primary->host, primary->port);
    free(text);
    if (port < 0)
        return dl_client_err(c, DLOCK_EIO, "no free port to point the replicas at");
    return cut;
}

/* Between two tries: 0 to try again after pause_ns, or the code to give up
 * with (set on c, why saying what was still missing). */
static int next_try(dlock_client *c, const dh_wait *w, int64_t pause_ns,
                    const char *why)
{
    if (dl_now_ns() >= w->until_ns)
        return dl_client_err(c, DLOCK_ETIMEDOUT, "%s", why);
    sleep_ns(pause_ns);
    if (w->stop && w->stop(w->arg))
        return dl_client_err(c, DLOCK_ECANCELED, "interrupted: %s", why);
    return 0;
}

/* The failover is seen when any sentinel names a master other than old
 * that answers ROLE as one (the sentinels learn of it one after another). */
static int rd_tool_wait_failover(dlock_client *c, const char *name, const dh_server *old,
                                 const dh_wait *w, dh_server *out)
{
    (void)name; /* one master holds every name */
    const dl_url *u = c->url;
    if (kind_of(u) != RT_SENTINEL)
        return dl_client_err(c, DLOCK_ENOTSUP, "%s has no failover to wait for", u->redacted);
    rconf cf;
    int rc = ctl_conf(c, &cf);
    if (rc)
        return rc;
    rconf scf = sentinel_conf(&cf);
    while (rc == 0) {
        for (size_t i = 0; i < u->nhosts; i++) {
            char host[256], err[300], role[16];
            int port, mp;
            if (ask_sentinel(&scf, u->hosts[i].host, u->hosts[i].port, u->path, host,
                             sizeof host, &port, err, sizeof err) != RD_OK ||
                same_server(host, port, old->host, old->port))
                continue;
            ctl_role(&cf, host, port, role, sizeof role, &mp);
            if (strcmp(role, "master") == 0) {
                snprintf(out->host, sizeof out->host, "%s", host);
                out->port = port;
                rd_conf_free(&cf);
                return 0;
            }
        }
        rc = next_try(c, w, FAILOVER_POLL_NS, "no sentinel names another master yet");
    }
    rd_conf_free(&cf);
    return rc;
}

/* ---- settling back ---- */

typedef struct deploy {
    const rconf *cf;
    rconf scf;
    const char *master_name;
    const dh_member *m;
    int n;
} deploy;

static int member_at(const deploy *d, const char *host, int port)
{
    for (int i = 0; i < d->n; i++)
        if (same_server(d->m[i].addr.host, d->m[i].addr.port, host, port))
            return i;
    return -1;
}

/* "host:port" of member i, for messages. */
static const char *mname(const deploy *d, int i, char *buf, size_t len)
{
    snprintf(buf, len, "%.200s:%d", d->m[i].addr.host, d->m[i].addr.port);
    return buf;
}

/* The data server sentinel i names as master, or -1. */
static int named_master(const deploy *d, int i)
{
    char host[256], err[300];
    int port;
    if (ask_sentinel(&d->scf, d->m[i].addr.host, d->m[i].addr.port, d->master_name, host,
                     sizeof host, &port, err, sizeof err) != RD_OK)
        return -1;
    return member_at(d, host, port);
}

/*
 * Whether sentinel i has settled on master m: no failover in progress, the
 * master not thought down, and every other data server known to it as an
 * up replica. A fault injected before every sentinel has settled starts a
 * failover some of them are not ready for; one that waits never does.
 */
static bool sentinel_settled(const deploy *d, int i, int m, char *why, size_t whylen)
{
    char a[300], b[300];
    const dh_member *s = &d->m[i];
    redisReply *r =
        ctl_cmd(&d->scf, s->addr.host, s->addr.port, "SENTINEL", "master", d->master_name);
    bool ok = pairs_reply(r) && strcmp(field(r, "flags"), "master") == 0;
    if (!ok)
        snprintf(why, whylen, "sentinel %s sees master %s as \"%s\"", mname(d, i, a, sizeof a),
                 mname(d, m, b, sizeof b), r ? field(r, "flags") : "?");
    if (r)
        freeReplyObject(r);
    if (!ok)
        return false;
    r = ctl_cmd(&d->scf, s->addr.host, s->addr.port, "SENTINEL", "replicas", d->master_name);
    for (int j = 0; ok && j < d->n; j++) {
        if (j == m || d->m[j].role != DH_DATA)
            continue;
        const char *flags = NULL;
        for (size_t k = 0; r && r->type == REDIS_REPLY_ARRAY && k < r->elements; k++)
            if (atoi(field(r->element[k], "port")) == d->m[j].addr.port)
                flags = field(r->element[k], "flags");
        ok = flags && strcmp(flags, "slave") == 0;
        if (!ok)
            snprintf(why, whylen, "sentinel %s sees replica %s as \"%s\"",
                     mname(d, i, a, sizeof a), mname(d, j, b, sizeof b),
                     flags ? flags : "unknown");
    }
    if (r)
        freeReplyObject(r);
    return ok;
}

/* The master every answering sentinel names, when they agree and it
 * answers ROLE as a master; -1 otherwise, with what is missing in why. */
static int agreed_master(const deploy *d, char *why, size_t whylen)
{
    int m = -1, asked = 0;
    char a[300], b[300];
    snprintf(why, whylen, "no sentinel names a master");
    for (int i = 0; i < d->n; i++) {
        if (d->m[i].role != DH_COORDINATOR)
            continue;
        int named = named_master(d, i);
        if (named < 0)
            continue; /* a sentinel that does not answer has no say */
        if (asked++ && named != m) {
            snprintf(why, whylen, "the sentinels disagree: %s or %s", mname(d, m, a, sizeof a),
                     mname(d, named, b, sizeof b));
            return -1;
        }
        m = named;
    }
    if (m < 0)
        return -1;
    char role[16];
    int mp;
    ctl_role(d->cf, d->m[m].addr.host, d->m[m].addr.port, role, sizeof role, &mp);
    if (strcmp(role, "master") != 0) {
        snprintf(why, whylen, "the sentinels name %s, which answers as \"%s\"",
                 mname(d, m, a, sizeof a), role);
        return -1;
    }
    return m;
}

/* How many of the data servers other than m replicate from m in sync (the
 * master's INFO says state=online); their names, and the others', in what. */
static int replicas_in_sync(const deploy *d, int m, char *what, size_t whatlen)
{
    char *text = ctl_info(d->cf, d->m[m].addr.host, d->m[m].addr.port, "replication");
    int online = 0;
    size_t used = 0;
    what[0] = '\0';
    for (int i = 0; i < d->n; i++) {
        if (i == m || d->m[i].role != DH_DATA)
            continue;
        char needle[32], a[300];
        snprintf(needle, sizeof needle, ",port=%d,state=", d->m[i].addr.port);
        char *p = text ? strstr(text, needle) : NULL;
        bool in_sync = p && strncmp(p + strlen(needle), "online", 6) == 0;
        online += in_sync;
        int w = snprintf(what + used, whatlen - used, "%s%s %s", used ? ", " : "",
                         mname(d, i, a, sizeof a),
                         in_sync ? "in sync" : p ? "syncing" : "not connected");
        if (w > 0 && (size_t)w < whatlen - used)
            used += (size_t)w;
    }
    free(text);
    return online;
}

/*
 * Back to one master, named by every sentinel, with every other data server
 * replicating from it in sync, and every sentinel settled on that. The
 * sentinels reconfigure servers themselves (a restarted old master, replicas
 * after a failover), so this converges with them instead of racing them: it
 * only points a server at the master the sentinels agree on (again, if it
 * is still not in sync REPOINT_NS later).
 */
static int settle_sentinel(dlock_client *c, const deploy *d, const dh_wait *w)
{
    int64_t *pointed = calloc((size_t)d->n, sizeof *pointed);
    if (!pointed)
        return dl_client_err(c, DLOCK_ENOMEM, "out of memory");
    int last_m = -1, rc = 0;
    char why[700] = "", what[512] = "";
    for (;;) {
        int64_t now = dl_now_ns();
        int m = agreed_master(d, why, sizeof why);
        if (m >= 0) {
            if (m != last_m)
                memset(pointed, 0, (size_t)d->n * sizeof *pointed);
            last_m = m;
            int want = 0;
            char pb[16];
            snprintf(pb, sizeof pb, "%d", d->m[m].addr.port);
            for (int i = 0; i < d->n; i++) {
                if (i == m || d->m[i].role != DH_DATA)
                    continue;
                want++;
                char role[16];
                int mp;
                ctl_role(d->cf, d->m[i].addr.host, d->m[i].addr.port, role, sizeof role, &mp);
                bool follows = strcmp(role, "slave") == 0 && mp == d->m[m].addr.port;
                if (pointed[i] && now - pointed[i] < REPOINT_NS)
                    continue; /* told already; give it time */
                if (follows && !pointed[i]) {
                    pointed[i] = now; /* the sentinels did it; its clock starts */
                    continue;
                }
                redisReply *r = ctl_cmd(d->cf, d->m[i].addr.host, d->m[i].addr.port, "REPLICAOF",
                                        d->m[m].addr.host, pb);
                if (r)
                    freeReplyObject(r);
                pointed[i] = now;
            }
            int online = replicas_in_sync(d, m, what, sizeof what);
            char a[300];
            if (online < want) {
                snprintf(why, sizeof why, "master %s: %s", mname(d, m, a, sizeof a), what);
            } else {
                bool settled = true;
                for (int i = 0; i < d->n && settled; i++)
                    if (d->m[i].role == DH_COORDINATOR &&
                        ready(d->cf, &d->m[i], a, sizeof a) == 0)
                        settled = sentinel_settled(d, i, m, why, sizeof why);
                if (settled)
                    break;
            }
        }
        if ((rc = next_try(c, w, SETTLE_POLL_NS, why)) != 0)
            break;
    }
    free(pointed);
    return rc;
}

/* Every node says cluster_state:ok. */
static int settle_cluster(dlock_client *c, const deploy *d, const dh_wait *w)
{
    for (int i = 0; i < d->n; i++) {
        for (;;) {
            redisReply *r =
                ctl_cmd(d->cf, d->m[i].addr.host, d->m[i].addr.port, "CLUSTER", "INFO", NULL);
            bool ok = text_reply(r) && strstr(r->str, "cluster_state:ok");
            if (r)
                freeReplyObject(r);
            if (ok)
                break;
            char a[300], why[400];
            snprintf(why, sizeof why, "cluster node %s does not say cluster_state:ok",
                     mname(d, i, a, sizeof a));
            int rc = next_try(c, w, SETTLE_POLL_NS / 2, why);
            if (rc)
                return rc;
        }
    }
    return 0;
}

/* Every server answers. */
static int settle_ready(dlock_client *c, const deploy *d, const dh_wait *w)
{
    for (int i = 0; i < d->n; i++) {
        char why[400];
        while (ready(d->cf, &d->m[i], why, sizeof why) != 0) {
            int rc = next_try(c, w, FAILOVER_POLL_NS, why);
            if (rc)
                return rc;
        }
    }
    return 0;
}

static int rd_tool_settle(dlock_client *c, const dh_member *m, int n,
                          const dh_wait *w)
{
    rconf cf;
    int rc = ctl_conf(c, &cf);
    if (rc)
        return rc;
    deploy d = {.cf = &cf, .scf = sentinel_conf(&cf), .master_name = c->url->path, .m = m,
                .n = n};
    switch (kind_of(c->url)) {
    case RT_SENTINEL:
        rc = settle_sentinel(c, &d, w);
        break;
    case RT_CLUSTER:
        rc = settle_cluster(c, &d, w);
        break;
    default:
        rc = settle_ready(c, &d, w);
        break;
    }
    rd_conf_free(&cf);
    return rc;
}

const struct dh_tools dh_tools_redis = {
    .baseline = rd_tool_baseline,
    .relay = rd_tool_relay,
    .counters = rd_tool_counters,
    .lock_servers = rd_tool_lock_servers,
    .topology = rd_tool_topology,
    .members = rd_tool_members,
    .server_ready = rd_tool_server_ready,
    .cut_replication = rd_tool_cut_replication,
    .wait_failover = rd_tool_wait_failover,
    .settle = rd_tool_settle,
};

/* Redlock: no relay, a hand-over is not one server's chain. */
const struct dh_tools dh_tools_redlock = {
    .baseline = rd_tool_baseline,
    .counters = rd_tool_counters,
    .lock_servers = rd_tool_lock_servers,
    .topology = rd_tool_topology,
    .members = rd_tool_members,
    .server_ready = rd_tool_server_ready,
    .settle = rd_tool_settle,
};
