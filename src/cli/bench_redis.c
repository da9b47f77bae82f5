/*
 * bench_redis.c — what `dlock check` uses to control the servers of the
 * Redis family it faults: the URL taken apart (dlock_tool_parse_url), a
 * hiredis connection to one server (check_hiredis.h: weak references, so a
 * build without hiredis still links), and which servers hold a lock now.
 *
 * `dlock bench` no longer talks to Redis itself: its round trip, relay and
 * command counters are the library's tool operations (src/tools.h,
 * src/redis/tools.c), reached through bench_adapter.c; so is the slot and
 * Sentinel lookup behind ms_redis_lock_nodes.
 */
#include "measure.h"

#include "tools.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
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
    dlock_tool_url u;
    if (dlock_tool_parse_url(url, &u, err, errlen) != 0)
        return -1;
    int rc = 0;
    if (u.nhosts == 0 || u.nhosts > MS_RMAX) {
        snprintf(err, errlen, "%d hosts in the URL (1 to %d wanted)", u.nhosts, MS_RMAX);
        rc = -1;
    }
    for (int i = 0; rc == 0 && i < u.nhosts; i++) {
        snprintf(t->host[i].host, sizeof t->host[i].host, "%s", u.host[i].host);
        t->host[i].port = u.host[i].port;
        t->nhosts++;
    }
    snprintf(t->user, sizeof t->user, "%s", u.user);
    snprintf(t->password, sizeof t->password, "%s", u.password);
    if (t->kind == MS_RK_SENTINEL && rc == 0) {
        size_t n = strlen(u.path);
        if (n >= sizeof t->master_name) {
            snprintf(err, errlen, "master name of %zu bytes (at most %zu)", n,
                     sizeof t->master_name - 1);
            rc = -1;
        } else {
            memcpy(t->master_name, u.path, n + 1);
        }
    }
    explicit_bzero(&u, sizeof u);
    if (rc == 0 && !(t->url = strdup(url))) {
        snprintf(err, errlen, "out of memory");
        rc = -1;
    }
    if (rc)
        ms_redis_target_clear(t);
    return rc;
}

void ms_redis_target_clear(ms_rtarget *t)
{
    explicit_bzero(t->password, sizeof t->password);
    if (t->url) {
        explicit_bzero(t->url, strlen(t->url));
        free(t->url);
        t->url = NULL;
    }
}

int ms_redis_lock_nodes(const ms_rtarget *t, const char *name, ms_endpoint *out, int max,
                        char *err, size_t errlen)
{
    if (max < 1)
        return 0;
    if (t->kind == MS_RK_SINGLE || t->kind == MS_RK_REDLOCK) {
        /* the URL's master(s): nothing to ask, even of a server that is down */
        int n = t->kind == MS_RK_SINGLE ? 1 : t->nhosts < max ? t->nhosts : max;
        for (int i = 0; i < n; i++)
            out[i] = t->host[i];
        return n;
    }
    /* Sentinel and cluster: the library finds the master or the slot's node. */
    dlock_client_opts o;
    dlock_client_opts_init(&o);
    o.connect_timeout_ms = o.op_timeout_ms = 1000;
    dlock_client *c = NULL;
    if (!t->url || dlock_client_open(&c, t->url, &o) != 0) {
        snprintf(err, errlen, "%s", t->url ? dlock_client_errmsg(NULL) : "no URL");
        return -1;
    }
    dlock_tool_server sv[MS_RMAX];
    int n = dlock_tool_lock_servers(c, name, sv, max < MS_RMAX ? max : MS_RMAX);
    if (n < 0)
        snprintf(err, errlen, "%s", dlock_client_errmsg(c));
    for (int i = 0; i < n; i++) {
        _Static_assert(sizeof out[i].host == sizeof sv[i].host, "one host size");
        memcpy(out[i].host, sv[i].host, sizeof out[i].host);
        out[i].port = sv[i].port;
    }
    dlock_client_close(c);
    return n < 0 ? -1 : n;
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

#else /* no hiredis in this build */

void *ms_redis_connect(const ms_rtarget *t, const char *host, int port, bool auth,
                       int timeout_ms, char *err, size_t errlen)
{
    (void)t, (void)host, (void)port, (void)auth, (void)timeout_ms;
    snprintf(err, errlen, "this build has no Redis client library (hiredis)");
    return NULL;
}

#endif
