/*
 * tools.c — the tool-facing operations of tools.h, dispatched through the
 * client's backend table (dl_backend.tools).
 */
#include "tools.h"

#include "internal.h"

#include <stdio.h>
#include <string.h>

/* The backend's operation, or NULL after setting the client's error. */
static const struct dl_tools *ops(dlock_client *c, const char *name, const void *out, int *rc)
{
    if (!c || c->closed || !out) {
        *rc = DLOCK_EINVAL;
        if (c)
            dl_client_err(c, DLOCK_EINVAL, "invalid argument");
        return NULL;
    }
    char why[128];
    if (dlock_name_valid(name, why, sizeof why) != 0) {
        *rc = dl_client_err(c, DLOCK_ENAME, "%s", why);
        return NULL;
    }
    *rc = 0;
    return c->be->tools;
}

static int notsup(dlock_client *c, const char *what)
{
    return dl_client_err(c, DLOCK_ENOTSUP, "the %s backend has no %s", c->be->name, what);
}

int dlock_tool_baseline(dlock_client *c, const char *name, int iters, int64_t max_ns,
                        dlock_tool_timing *out)
{
    int rc;
    const struct dl_tools *t = ops(c, name, out, &rc);
    if (rc)
        return rc;
    if (!t || !t->baseline)
        return notsup(c, "baseline round trip");
    if (iters < 1 || max_ns <= 0)
        return dl_client_err(c, DLOCK_EINVAL, "baseline: no samples asked for");
    memset(out, 0, sizeof *out);
    return t->baseline(c, name, iters, max_ns, out);
}

int dlock_tool_relay(dlock_client *c, const char *name, int iters, dlock_tool_timing *out)
{
    int rc;
    const struct dl_tools *t = ops(c, name, out, &rc);
    if (rc)
        return rc;
    if (!t || !t->relay)
        return notsup(c, "bare hand-over chain to time");
    if (iters < 1)
        return dl_client_err(c, DLOCK_EINVAL, "relay: no rounds asked for");
    memset(out, 0, sizeof *out);
    return t->relay(c, name, iters, out);
}

int dlock_tool_read_counters(dlock_client *c, const char *name, dlock_tool_counters *out)
{
    int rc;
    const struct dl_tools *t = ops(c, name, out, &rc);
    if (rc)
        return rc;
    if (!t || !t->counters)
        return notsup(c, "server command counters");
    memset(out, 0, sizeof *out);
    return t->counters(c, name, out);
}

int dlock_tool_lock_servers(dlock_client *c, const char *name, dlock_tool_server *out, int max)
{
    int rc;
    const struct dl_tools *t = ops(c, name, out, &rc);
    if (rc)
        return rc;
    if (!t || !t->lock_servers)
        return notsup(c, "servers to name");
    if (max < 1)
        return dl_client_err(c, DLOCK_EINVAL, "lock servers: no room for any");
    memset(out, 0, (size_t)max * sizeof *out);
    return t->lock_servers(c, name, out, max);
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

int dlock_tool_parse_url(const char *url, dlock_tool_url *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    dl_url *u = NULL;
    int rc = dl_url_parse(url ? url : "", &u, err, errlen);
    if (rc)
        return rc;
    if (u->nhosts > DLOCK_TOOL_URL_HOSTS) {
        snprintf(err, errlen, "%s: %zu hosts (at most %d here)", u->redacted, u->nhosts,
                 DLOCK_TOOL_URL_HOSTS);
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
