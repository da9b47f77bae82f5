/*
 * bench_redis.c — talking to the servers of the Redis family directly, for
 * what `dlock bench` and `dlock check` measure or control beside the lock:
 * the raw round trip (PING), INFO commandstats, and which server holds a
 * lock's key (the master, found through Sentinel; the node of the key's slot
 * in a cluster; every master for Redlock).
 *
 * hiredis is used when the build has it (see check_hiredis.h); without it
 * these functions answer that the build cannot talk to Redis.
 */
#include "measure.h"

#include "internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>

#include "check_hiredis.h"

bool ms_redis_usable(void)
{
#ifdef MS_HIREDIS
    return redisConnectWithTimeout != NULL && redisCommandArgv != NULL;
#else
    return false;
#endif
}

int ms_redis_kind(const char *url)
{
    if (!url)
        return MS_RK_NONE;
    if (strncasecmp(url, "redis+sentinel://", 17) == 0)
        return MS_RK_SENTINEL;
    if (strncasecmp(url, "redis+cluster://", 16) == 0)
        return MS_RK_CLUSTER;
    if (strncasecmp(url, "redis://", 8) == 0)
        return MS_RK_SINGLE;
    if (strncasecmp(url, "redlock://", 10) == 0)
        return MS_RK_REDLOCK;
    return MS_RK_NONE;
}

int ms_redis_target(const char *url, ms_rtarget *t, char *err, size_t errlen)
{
    memset(t, 0, sizeof *t);
    t->kind = ms_redis_kind(url);
    if (t->kind == MS_RK_NONE) {
        snprintf(err, errlen, "not a URL of the Redis family");
        return -1;
    }
    if (!ms_redis_usable()) {
        snprintf(err, errlen, "this build has no Redis client library (hiredis)");
        return -1;
    }
    dl_url *u = NULL;
    if (dl_url_parse(url, &u, err, errlen) != 0)
        return -1;
    int rc = 0;
    if (u->nhosts == 0 || u->nhosts > MS_RMAX) {
        snprintf(err, errlen, "%zu hosts in the URL (1 to %d wanted)", u->nhosts, MS_RMAX);
        rc = -1;
    }
    for (size_t i = 0; rc == 0 && i < u->nhosts; i++) {
        snprintf(t->host[i].host, sizeof t->host[i].host, "%s", u->hosts[i].host);
        t->host[i].port = u->hosts[i].port;
        t->nhosts++;
    }
    if (u->user)
        snprintf(t->user, sizeof t->user, "%s", u->user);
    if (u->password)
        snprintf(t->password, sizeof t->password, "%s", u->password);
    if (t->kind == MS_RK_SENTINEL && u->path)
        snprintf(t->master_name, sizeof t->master_name, "%s", u->path);
    dl_url_free(u);
    if (rc)
        ms_redis_target_clear(t);
    return rc;
}

void ms_redis_target_clear(ms_rtarget *t)
{
    explicit_bzero(t->password, sizeof t->password);
}

#ifdef MS_HIREDIS

void *ms_redis_connect(const ms_rtarget *t, const char *host, int port, bool auth,
                       int timeout_ms, char *err, size_t errlen)
{
    struct timeval tv = {.tv_sec = timeout_ms / 1000, .tv_usec = (timeout_ms % 1000) * 1000};
    redisContext *c = redisConnectWithTimeout(host, port, tv);
    if (!c || c->err) {
        snprintf(err, errlen, "%s:%d: %s", host, port, c ? c->errstr : "out of memory");
        if (c)
            redisFree(c);
        return NULL;
    }
    (void)redisSetTimeout(c, tv);
    if (auth && t && t->password[0]) {
        const char *argv[3] = {"AUTH", t->user[0] ? t->user : t->password, t->password};
        int argc = t->user[0] ? 3 : 2;
        redisReply *r = redisCommandArgv(c, argc, argv, NULL);
        bool ok = r && r->type != REDIS_REPLY_ERROR;
        if (r)
            freeReplyObject(r);
        if (!ok) {
            snprintf(err, errlen, "%s:%d: AUTH failed", host, port);
            redisFree(c);
            return NULL;
        }
    }
    return c;
}

void ms_redis_close(void *ctx)
{
    if (ctx)
        redisFree(ctx);
}

/* The reply to one command, as text (status, string, error, integer), or
 * NULL for no reply or another type. Caller frees. */
char *ms_redis_text(void *ctx, int argc, const char **argv, bool *is_error)
{
    redisReply *r = redisCommandArgv(ctx, argc, argv, NULL);
    if (is_error)
        *is_error = r && r->type == REDIS_REPLY_ERROR;
    if (!r)
        return NULL;
    char *out = NULL;
    if (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS ||
        r->type == REDIS_REPLY_ERROR) {
        out = malloc(r->len + 1);
        if (out) {
            memcpy(out, r->str, r->len);
            out[r->len] = '\0';
        }
    } else if (r->type == REDIS_REPLY_INTEGER) {
        out = malloc(24);
        if (out)
            snprintf(out, 24, "%lld", r->integer);
    }
    freeReplyObject(r);
    return out;
}

/* CRC16-CCITT (XMODEM), as Redis Cluster hashes keys. */
static unsigned crc16(const char *buf, size_t len)
{
    unsigned crc = 0;
    for (size_t i = 0; i < len; i++) {
        crc ^= (unsigned)(unsigned char)buf[i] << 8;
        for (int k = 0; k < 8; k++)
            crc = crc & 0x8000 ? (crc << 1) ^ 0x1021 : crc << 1;
        crc &= 0xffff;
    }
    return crc;
}

/* Every key of a lock shares the {NAME} hash tag. */
static int key_slot(const char *name)
{
    return (int)(crc16(name, strlen(name)) & 16383);
}

static int sentinel_master(const ms_rtarget *t, ms_endpoint *out, char *err, size_t errlen)
{
    snprintf(err, errlen, "no sentinel answered");
    for (int i = 0; i < t->nhosts; i++) {
        char e[256];
        redisContext *c = ms_redis_connect(NULL, t->host[i].host, t->host[i].port, false, 1000,
                                           e, sizeof e);
        if (!c) {
            snprintf(err, errlen, "sentinel %s", e);
            continue;
        }
        const char *argv[3] = {"SENTINEL", "get-master-addr-by-name", t->master_name};
        redisReply *r = redisCommandArgv(c, 3, argv, NULL);
        bool ok = r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
                  r->element[0]->type == REDIS_REPLY_STRING &&
                  r->element[1]->type == REDIS_REPLY_STRING;
        if (ok) {
            snprintf(out->host, sizeof out->host, "%s", r->element[0]->str);
            out->port = atoi(r->element[1]->str);
        } else {
            snprintf(err, errlen, "sentinel %s:%d does not know master \"%s\"", t->host[i].host,
                     t->host[i].port, t->master_name);
        }
        if (r)
            freeReplyObject(r);
        redisFree(c);
        if (ok)
            return 0;
    }
    return -1;
}

static int cluster_node_for(const ms_rtarget *t, int slot, ms_endpoint *out, char *err,
                            size_t errlen)
{
    snprintf(err, errlen, "no cluster node answered");
    for (int i = 0; i < t->nhosts; i++) {
        char e[256];
        redisContext *c =
            ms_redis_connect(t, t->host[i].host, t->host[i].port, true, 1000, e, sizeof e);
        if (!c) {
            snprintf(err, errlen, "%s", e);
            continue;
        }
        const char *argv[2] = {"CLUSTER", "SLOTS"};
        redisReply *r = redisCommandArgv(c, 2, argv, NULL);
        bool found = false;
        for (size_t k = 0; r && r->type == REDIS_REPLY_ARRAY && k < r->elements && !found; k++) {
            redisReply *e3 = r->element[k];
            if (e3->type != REDIS_REPLY_ARRAY || e3->elements < 3 ||
                e3->element[0]->type != REDIS_REPLY_INTEGER ||
                e3->element[1]->type != REDIS_REPLY_INTEGER ||
                e3->element[2]->type != REDIS_REPLY_ARRAY || e3->element[2]->elements < 2)
                continue;
            if (slot < e3->element[0]->integer || slot > e3->element[1]->integer)
                continue;
            redisReply *m = e3->element[2];
            if (m->element[0]->type != REDIS_REPLY_STRING ||
                m->element[1]->type != REDIS_REPLY_INTEGER)
                continue;
            snprintf(out->host, sizeof out->host, "%s",
                     m->element[0]->len ? m->element[0]->str : t->host[i].host);
            out->port = (int)m->element[1]->integer;
            found = true;
        }
        if (!found)
            snprintf(err, errlen, "no node of %s:%d serves slot %d", t->host[i].host,
                     t->host[i].port, slot);
        if (r)
            freeReplyObject(r);
        redisFree(c);
        if (found)
            return 0;
    }
    return -1;
}

int ms_redis_lock_nodes(const ms_rtarget *t, const char *name, ms_endpoint *out, int max,
                        char *err, size_t errlen)
{
    switch (t->kind) {
    case MS_RK_SINGLE:
        if (max < 1)
            return 0;
        out[0] = t->host[0];
        return 1;
    case MS_RK_REDLOCK: {
        int n = t->nhosts < max ? t->nhosts : max;
        for (int i = 0; i < n; i++)
            out[i] = t->host[i];
        return n;
    }
    case MS_RK_SENTINEL:
        if (max < 1)
            return 0;
        return sentinel_master(t, &out[0], err, errlen) == 0 ? 1 : -1;
    case MS_RK_CLUSTER:
        if (max < 1)
            return 0;
        return cluster_node_for(t, key_slot(name), &out[0], err, errlen) == 0 ? 1 : -1;
    default:
        snprintf(err, errlen, "not a URL of the Redis family");
        return -1;
    }
}

/* ---- the round trip ------------------------------------------------------ */

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* PING on every connection at once (all written before any is read), until
 * iters samples or max_ns: each sample is the time until the last reply. */
static int ping_samples(redisContext **cs, int n, int iters, int64_t max_ns, ms_rtt *out,
                        char *err, size_t errlen)
{
    int64_t *v = malloc((size_t)iters * sizeof *v);
    if (!v) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    const char *argv[1] = {"PING"};
    int k = 0, rc = 0;
    int64_t stop = ms_now_ns() + max_ns;
    while (k < iters && ms_now_ns() < stop && rc == 0) {
        int64_t t0 = ms_now_ns();
        for (int i = 0; i < n && rc == 0; i++) {
            int done = 0;
            if (redisAppendCommandArgv(cs[i], 1, argv, NULL) != REDIS_OK)
                rc = -1;
            while (rc == 0 && !done)
                if (redisBufferWrite(cs[i], &done) != REDIS_OK)
                    rc = -1;
        }
        for (int i = 0; i < n && rc == 0; i++) {
            void *r = NULL;
            if (redisGetReply(cs[i], &r) != REDIS_OK || !r)
                rc = -1;
            else
                freeReplyObject(r);
        }
        if (rc == 0)
            v[k++] = ms_now_ns() - t0;
    }
    if (rc) {
        snprintf(err, errlen, "PING failed");
        free(v);
        return -1;
    }
    qsort(v, (size_t)k, sizeof *v, cmp_i64);
    out->p50 = ms_pct(v, (size_t)k, 500);
    out->p99 = ms_pct(v, (size_t)k, 990);
    out->samples = (size_t)k;
    free(v);
    return 0;
}

int ms_redis_rtt(const ms_rtarget *t, const char *name, int iters, int64_t max_ns,
                 ms_rtt *all, ms_rtt *one, char *what, size_t whatlen, char *err, size_t errlen)
{
    ms_endpoint ep[MS_RMAX];
    int n = ms_redis_lock_nodes(t, name, ep, MS_RMAX, err, errlen);
    if (n <= 0)
        return -1;
    redisContext *cs[MS_RMAX] = {0};
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++)
        if (!(cs[i] = ms_redis_connect(t, ep[i].host, ep[i].port, true, 2000, err, errlen)))
            rc = -1;
    memset(one, 0, sizeof *one);
    if (rc == 0) {
        /* warm up the connections and the server's path */
        ms_rtt w;
        rc = ping_samples(cs, n, 200, max_ns, &w, err, errlen);
    }
    if (rc == 0)
        rc = ping_samples(cs, n, iters, max_ns, all, err, errlen);
    if (rc == 0 && n > 1)
        rc = ping_samples(cs, 1, iters, max_ns, one, err, errlen);
    else if (rc == 0)
        *one = *all;
    for (int i = 0; i < n; i++)
        if (cs[i])
            redisFree(cs[i]);
    if (rc == 0) {
        switch (t->kind) {
        case MS_RK_REDLOCK:
            snprintf(what, whatlen,
                     "PING to all %d masters in parallel (time to the last reply); "
                     "rtt_single: PING to %s:%d alone",
                     n, ep[0].host, ep[0].port);
            break;
        case MS_RK_CLUSTER:
            snprintf(what, whatlen, "PING on one connection to %s:%d, the node of the lock's slot",
                     ep[0].host, ep[0].port);
            break;
        case MS_RK_SENTINEL:
            snprintf(what, whatlen, "PING on one connection to the master %s:%d (from Sentinel)",
                     ep[0].host, ep[0].port);
            break;
        default:
            snprintf(what, whatlen, "PING on one connection to the master %s:%d", ep[0].host,
                     ep[0].port);
            break;
        }
    }
    return rc;
}

/* ---- relay: the bare hand-over the server offers -------------------------- */

/*
 * A lock hand-over is a one-way chain: the holder's request wakes the server,
 * whose reply wakes another process. The relay measures the same chain with
 * nothing of the lock in it: thread B blocks in BLPOP, A pushes one element
 * (RPUSH), and the sample is from just before A's send to B's wake-up. The
 * lock's hand-over divided by it is what the lock itself adds.
 */
typedef struct relay {
    redisContext *b;
    const char *key;
    int iters;
    int64_t *woke;        /* per round, when B had its reply */
    _Atomic int sent;     /* rounds whose BLPOP B has sent */
    _Atomic int failed;
} relay;

static void *relay_b(void *arg)
{
    relay *rl = arg;
    const char *argv[3] = {"BLPOP", rl->key, "5"};
    for (int i = 0; i < rl->iters; i++) {
        void *r = NULL;
        if (redisAppendCommandArgv(rl->b, 3, argv, NULL) != REDIS_OK) {
            atomic_store(&rl->failed, 1);
            break;
        }
        int done = 0;
        while (!done)
            if (redisBufferWrite(rl->b, &done) != REDIS_OK)
                break;
        atomic_store(&rl->sent, i + 1);
        if (!done || redisGetReply(rl->b, &r) != REDIS_OK || !r) {
            atomic_store(&rl->failed, 1);
            break;
        }
        rl->woke[i] = ms_now_ns();
        bool popped = ((redisReply *)r)->type == REDIS_REPLY_ARRAY;
        freeReplyObject(r);
        if (!popped) {
            atomic_store(&rl->failed, 1);
            break;
        }
    }
    return NULL;
}

int ms_redis_relay(const ms_rtarget *t, const char *name, int iters, ms_rtt *out, char *err,
                   size_t errlen)
{
    ms_endpoint ep[MS_RMAX];
    int n = ms_redis_lock_nodes(t, name, ep, MS_RMAX, err, errlen);
    if (n <= 0)
        return -1;
    char key[300];
    snprintf(key, sizeof key, "dlock:{%s}:bench-relay", name); /* the lock's slot */
    redisContext *a = ms_redis_connect(t, ep[0].host, ep[0].port, true, 2000, err, errlen);
    redisContext *b = a ? ms_redis_connect(t, ep[0].host, ep[0].port, true, 7000, err, errlen)
                        : NULL;
    int64_t *sent_at = calloc((size_t)iters, sizeof *sent_at);
    int64_t *woke = calloc((size_t)iters, sizeof *woke);
    int rc = a && b && sent_at && woke ? 0 : -1;
    if (rc == 0 && (!sent_at || !woke))
        snprintf(err, errlen, "out of memory");
    relay rl = {.b = b, .key = key, .iters = iters, .woke = woke};
    pthread_t th;
    bool started = rc == 0 && pthread_create(&th, NULL, relay_b, &rl) == 0;
    if (rc == 0 && !started) {
        snprintf(err, errlen, "cannot start a thread");
        rc = -1;
    }
    const char *push[3] = {"RPUSH", key, "1"};
    int k = 0;
    for (; rc == 0 && k < iters; k++) {
        /* B's BLPOP sent, and given a millisecond to reach the server. */
        while (atomic_load(&rl.sent) <= k && !atomic_load(&rl.failed))
            ms_sleep_ns(100000);
        if (atomic_load(&rl.failed))
            break;
        ms_sleep_ns(1000000);
        sent_at[k] = ms_now_ns();
        redisReply *r = redisCommandArgv(a, 3, push, NULL);
        bool ok = r && r->type == REDIS_REPLY_INTEGER;
        if (r)
            freeReplyObject(r);
        if (!ok) {
            snprintf(err, errlen, "RPUSH failed");
            rc = -1;
        }
    }
    if (started) {
        if (rc != 0 || atomic_load(&rl.failed))
            shutdown(b->fd, SHUT_RDWR); /* end a BLPOP that will not be served */
        pthread_join(th, NULL);
    }
    if (rc == 0 && atomic_load(&rl.failed)) {
        snprintf(err, errlen, "BLPOP failed");
        rc = -1;
    }
    if (rc == 0) {
        for (int i = 0; i < iters; i++)
            sent_at[i] = woke[i] - sent_at[i];
        qsort(sent_at, (size_t)iters, sizeof *sent_at, cmp_i64);
        out->p50 = ms_pct(sent_at, (size_t)iters, 500);
        out->p99 = ms_pct(sent_at, (size_t)iters, 990);
        out->samples = (size_t)iters;
    }
    if (a) {
        const char *del[2] = {"DEL", key};
        redisReply *r = redisCommandArgv(a, 2, del, NULL);
        if (r)
            freeReplyObject(r);
        redisFree(a);
    }
    if (b)
        redisFree(b);
    free(sent_at);
    free(woke);
    return rc;
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

static void stats_add(ms_cmdstats *s, const char *name, size_t len, uint64_t calls)
{
    if (len >= sizeof s->name[0])
        len = sizeof s->name[0] - 1;
    for (int i = 0; i < s->n; i++)
        if (strlen(s->name[i]) == len && strncmp(s->name[i], name, len) == 0) {
            s->calls[i] += calls;
            return;
        }
    if (s->n < MS_CMDSTATS_MAX) {
        memcpy(s->name[s->n], name, len);
        s->name[s->n][len] = '\0';
        s->calls[s->n++] = calls;
    }
}

int ms_redis_cmdstats(const ms_rtarget *t, const char *name, ms_cmdstats *out, char *err,
                      size_t errlen)
{
    memset(out, 0, sizeof *out);
    ms_endpoint ep[MS_RMAX];
    int n;
    if (t->kind == MS_RK_CLUSTER) {
        /* names spread over every slot: every node counts */
        n = t->nhosts;
        for (int i = 0; i < n; i++)
            ep[i] = t->host[i];
    } else {
        n = ms_redis_lock_nodes(t, name, ep, MS_RMAX, err, errlen);
        if (n <= 0)
            return -1;
    }
    for (int i = 0; i < n; i++) {
        redisContext *c = ms_redis_connect(t, ep[i].host, ep[i].port, true, 2000, err, errlen);
        if (!c)
            return -1;
        const char *argv[2] = {"INFO", "commandstats"};
        bool e = false;
        char *text = ms_redis_text(c, 2, argv, &e);
        redisFree(c);
        if (!text || e) {
            snprintf(err, errlen, "%s:%d: INFO commandstats failed", ep[i].host, ep[i].port);
            free(text);
            return -1;
        }
        /* cmdstat_NAME[|SUB]:calls=N,usec=... */
        for (char *line = strtok(text, "\r\n"); line; line = strtok(NULL, "\r\n")) {
            if (strncmp(line, "cmdstat_", 8) != 0)
                continue;
            char *cmd = line + 8, *colon = strchr(cmd, ':');
            char *calls = colon ? strstr(colon, "calls=") : NULL;
            if (!calls)
                continue;
            size_t base = strcspn(cmd, "|:");
            uint64_t k = strtoull(calls + 6, NULL, 10);
            if (strncasecmp(cmd, "info", base) == 0 && base == 4)
                continue; /* our own */
            if (is_client_cmd(cmd, base)) {
                out->client += k;
                stats_add(out, cmd, base, k);
            } else {
                out->internal += k;
            }
        }
        free(text);
    }
    out->servers = n;
    return 0;
}

#else /* no hiredis in this build */

void *ms_redis_connect(const ms_rtarget *t, const char *host, int port, bool auth,
                       int timeout_ms, char *err, size_t errlen)
{
    (void)t, (void)host, (void)port, (void)auth, (void)timeout_ms;
    snprintf(err, errlen, "this build has no Redis client library (hiredis)");
    return NULL;
}

void ms_redis_close(void *ctx)
{
    (void)ctx;
}

char *ms_redis_text(void *ctx, int argc, const char **argv, bool *is_error)
{
    (void)ctx, (void)argc, (void)argv;
    if (is_error)
        *is_error = false;
    return NULL;
}

int ms_redis_lock_nodes(const ms_rtarget *t, const char *name, ms_endpoint *out, int max,
                        char *err, size_t errlen)
{
    (void)t, (void)name, (void)out, (void)max;
    snprintf(err, errlen, "this build has no Redis client library (hiredis)");
    return -1;
}

int ms_redis_rtt(const ms_rtarget *t, const char *name, int iters, int64_t max_ns,
                 ms_rtt *all, ms_rtt *one, char *what, size_t whatlen, char *err, size_t errlen)
{
    (void)t, (void)name, (void)iters, (void)max_ns, (void)all, (void)one, (void)what,
        (void)whatlen;
    snprintf(err, errlen, "this build has no Redis client library (hiredis)");
    return -1;
}

int ms_redis_relay(const ms_rtarget *t, const char *name, int iters, ms_rtt *out, char *err,
                   size_t errlen)
{
    (void)t, (void)name, (void)iters, (void)out;
    snprintf(err, errlen, "this build has no Redis client library (hiredis)");
    return -1;
}

int ms_redis_cmdstats(const ms_rtarget *t, const char *name, ms_cmdstats *out, char *err,
                      size_t errlen)
{
    (void)t, (void)name, (void)out;
    snprintf(err, errlen, "this build has no Redis client library (hiredis)");
    return -1;
}

#endif
