/*
 * tools.c — the Redis family's tool operations (src/tools.h), for
 * `dlock bench` and `dlock check`: the PING round trip, the bare RPUSH ->
 * BLPOP hand-over, INFO commandstats and the servers that hold a lock.
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
#include "tools.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>

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

/* Where Sentinel says the master is: the first sentinel that answers. */
static int sentinel_master(const rtarget *t, const dl_url *u, char *host, size_t hostlen,
                           int *port, char *err, size_t errlen)
{
    rconf scf = t->cf;
    scf.user = scf.password = NULL; /* sentinels have their own auth */
    scf.db = 0;
    snprintf(err, errlen, "no sentinel answered");
    for (size_t i = 0; i < u->nhosts; i++) {
        rnode s;
        rnode_init(&s, u->hosts[i].host, u->hosts[i].port);
        char e[256];
        rconn *cn = rconn_get(&s, &scf, t->cf.connect_timeout_ms, NULL, e, sizeof e);
        redisReply *r = NULL;
        if (!cn) {
            snprintf(err, errlen, "%s", e);
        } else {
            rcmd cmd;
            rcmd_init(&cmd);
            rcmd_add(&cmd, "SENTINEL");
            rcmd_add(&cmd, "get-master-addr-by-name");
            rcmd_add(&cmd, u->path);
            if (rconn_call(cn, &cmd, 1, &r, t->cf.op_timeout_ms, -1, NULL, e, sizeof e) != RD_OK)
                snprintf(err, errlen, "sentinel %s:%d: %s", s.host, s.port, e);
            rconn_drop(cn);
        }
        bool ok = r && rd_addr_reply(r, host, hostlen, port) == 0;
        if (r && !ok) {
            rd_reply_desc(r, e, sizeof e);
            if (r->type == REDIS_REPLY_NIL)
                snprintf(err, errlen, "sentinel %s:%d does not know master \"%s\"", s.host,
                         s.port, u->path);
            else
                snprintf(err, errlen,
                         "sentinel %s:%d: master \"%s\": expected an array of {host, port}, "
                         "got %s",
                         s.host, s.port, u->path, e);
        }
        if (r)
            freeReplyObject(r);
        rnode_destroy(&s);
        if (ok)
            return 0;
    }
    return -1;
}

/* The servers holding name: 0, or a DLOCK_E* code set on c (what: for the
 * message). With seeds, a cluster's are the nodes its URL lists, and no
 * CLUSTER SLOTS is sent (it would count among the commands counted). */
static int rt_open(dlock_client *c, const char *name, rtarget *t, const char *what, bool seeds)
{
    const dl_url *u = c->url;
    memset(t, 0, sizeof *t);
    t->kind = strcmp(u->scheme, "redis+sentinel") == 0  ? RT_SENTINEL
              : strcmp(u->scheme, "redis+cluster") == 0 ? RT_CLUSTER
              : strcmp(u->scheme, "redlock") == 0       ? RT_REDLOCK
                                                        : RT_SINGLE;
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

static void summarize(int64_t *v, size_t n, dlock_tool_rtt *out)
{
    qsort(v, n, sizeof *v, cmp_i64);
    out->p50 = pct(v, n, 500);
    out->p99 = pct(v, n, 990);
    out->samples = n;
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
                        dlock_tool_rtt *out, char *err, size_t errlen)
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
            rconn_call_many(cs, n, &ping, r, st, t->cf.op_timeout_ms, NULL, NULL);
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
        summarize(v, (size_t)k, out);
    free(v);
    return rc;
}

static int rd_tool_baseline(dlock_client *c, const char *name, int iters, int64_t max_ns,
                            dlock_tool_timing *out)
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
    dlock_tool_rtt warm;
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

static int rd_tool_relay(dlock_client *c, const char *name, int iters, dlock_tool_timing *out)
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
        summarize(sent_at, (size_t)iters, &out->all);
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

static void stats_add(dlock_tool_counters *s, const char *name, size_t len, uint64_t calls)
{
    if (len >= sizeof s->name[0])
        len = sizeof s->name[0] - 1;
    for (int i = 0; i < s->n; i++)
        if (strlen(s->name[i]) == len && strncmp(s->name[i], name, len) == 0) {
            s->calls[i] += calls;
            return;
        }
    if (s->n < DLOCK_TOOL_COUNTERS_MAX) {
        memcpy(s->name[s->n], name, len);
        s->name[s->n][len] = '\0';
        s->calls[s->n++] = calls;
    }
}

typedef struct count_ctx {
    const rtarget *t;
    dlock_tool_counters *out;
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
    dlock_tool_counters *out = cc->out;
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

static int rd_tool_counters(dlock_client *c, const char *name, dlock_tool_counters *out)
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

static int rd_tool_lock_servers(dlock_client *c, const char *name, dlock_tool_server *out,
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

const struct dl_tools dl_tools_redis = {
    .baseline = rd_tool_baseline,
    .relay = rd_tool_relay,
    .counters = rd_tool_counters,
    .lock_servers = rd_tool_lock_servers,
};

/* Redlock: no relay, a hand-over is not one server's chain. */
const struct dl_tools dl_tools_redlock = {
    .baseline = rd_tool_baseline,
    .counters = rd_tool_counters,
    .lock_servers = rd_tool_lock_servers,
};
