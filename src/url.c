/* SPDX-License-Identifier: MIT */
/*
 * url.c — backend URLs and lock names.
 *
 * Grammar: scheme://[user[:password]@]host[:port][,host[:port]...][/path][?k=v&k2]
 * and file:///abs/dir. The parser is strict where a mistake would be silent
 * (duplicate Redlock masters, duplicate parameters, a raw '@' that probably
 * belongs to a password) and never lets the password reach an error message.
 * Only libc and the registry: the fuzz targets compile this file with
 * coverage and link the rest of the library.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memrchr, explicit_bzero */
#endif
#include "internal.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define URL_MAX 4096       /* longest accepted URL, in bytes */
#define URL_QUOTE_MAX 200  /* longest URL quoted in an error message */
#define URL_MAX_HOSTS 64
#define HOST_MAX 253       /* DNS name limit */
#define REDIS_DB_MAX 1000000

/* Schemes, their ports and what their paths mean are facts of each backend,
 * stated once in its descriptor (dl_scheme); this file reads them through
 * the registry and knows only how to parse each kind of path. */
typedef dl_scheme scheme_info;

static const scheme_info *scheme_find(const char *name)
{
    return dl_scheme_find(name);
}

int dl_url_default_port(const char *scheme)
{
    if (!scheme)
        return 0;
    const scheme_info *si = scheme_find(scheme);
    return si ? si->port : 0;
}

/* ---- error messages ---------------------------------------------------- */

typedef struct pctx {
    const char *s; /* the whole input */
    size_t len;
    char *err;
    size_t errlen;
} pctx;

static bool scheme_char(char c, bool first)
{
    if (isalpha((unsigned char)c))
        return true;
    return !first && (isdigit((unsigned char)c) || c == '+' || c == '-' || c == '.');
}

static bool scheme_syntax_ok(const char *s, size_t n)
{
    if (n == 0 || n > 32)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!scheme_char(s[i], i == 0))
            return false;
    return true;
}

/* Query keys whose values are secrets too (libpq takes ?password= and
 * ?sslpassword=). `k` is raw text. */
static bool secret_key(const char *k, size_t n)
{
    static const char suffix[] = "password";
    size_t sl = sizeof suffix - 1;
    return n >= sl && strncasecmp(k + n - sl, suffix, sl) == 0;
}

typedef struct sbuf {
    char *buf;
    size_t cap, n;
    bool trunc;
} sbuf;

static void sb_put(sbuf *b, const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (b->n + 1 >= b->cap) {
            b->trunc = true;
            return;
        }
        b->buf[b->n++] = p[i];
    }
}

/* Copy a raw query string (after '?') hiding secret values. A '%' in a key
 * could spell "password", so such values are hidden too. */
static void sb_query(sbuf *b, const char *q)
{
    while (*q) {
        size_t seg = strcspn(q, "&");
        const char *eq = memchr(q, '=', seg);
        size_t klen = eq ? (size_t)(eq - q) : seg;
        bool hide = secret_key(q, klen) || memchr(q, '%', klen) != NULL;
        if (eq && hide && eq + 1 < q + seg) {
            sb_put(b, q, klen + 1);
            sb_put(b, "***", 3);
        } else {
            sb_put(b, q, seg);
        }
        q += seg;
        if (*q == '&')
            sb_put(b, q++, 1);
    }
}

void dl_url_scrub(char *s)
{
    char *sep = strstr(s, "://");
    char *rest = sep && scheme_syntax_ok(s, (size_t)(sep - s)) ? sep + 3 : s;
    /* as safe_form below: over-redacts odd input, never under-redacts */
    char *at = strrchr(rest, '@');
    if (at) {
        char *colon = memchr(rest, ':', (size_t)(at - rest));
        if (colon)
            memset(colon + 1, '*', (size_t)(at - colon - 1));
    }
    char *q = strchr(at ? at : rest, '?');
    for (q = q ? q + 1 : NULL; q && *q;) {
        size_t seg = strcspn(q, "&");
        char *eq = memchr(q, '=', seg);
        size_t klen = eq ? (size_t)(eq - q) : seg;
        if (eq && (secret_key(q, klen) || memchr(q, '%', klen)))
            memset(eq + 1, '*', seg - klen - 1);
        q += seg;
        if (*q == '&')
            q++;
    }
}

/*
 * A password-free rendering of a URL that may be malformed: everything
 * between the first ':' after "scheme://" and the last '@' becomes "***", and
 * secret query values are hidden. It over-redacts on odd input, which is the
 * safe direction; the parser rejects every input where it would under-redact.
 */
static void safe_form(const char *s, char *buf, size_t cap)
{
    sbuf b = {buf, cap, 0, false};
    const char *sep = strstr(s, "://");
    const char *rest = s;
    if (sep && scheme_syntax_ok(s, (size_t)(sep - s)))
        rest = sep + 3;
    sb_put(&b, s, (size_t)(rest - s));
    const char *at = strrchr(rest, '@');
    const char *tail = rest;
    if (at) {
        const char *colon = memchr(rest, ':', (size_t)(at - rest));
        if (colon) {
            sb_put(&b, rest, (size_t)(colon + 1 - rest));
            sb_put(&b, "***", 3);
            tail = at;
        }
    }
    const char *q = strchr(at ? at : rest, '?');
    if (q) {
        sb_put(&b, tail, (size_t)(q + 1 - tail));
        sb_query(&b, q + 1);
    } else {
        sb_put(&b, tail, strlen(tail));
    }
    if (b.trunc) { /* cap is URL_QUOTE_MAX + 1: room for "..." */
        b.n = b.n > cap - 4 ? cap - 4 : b.n;
        memcpy(b.buf + b.n, "...", 3);
        b.n += 3;
    }
    b.buf[b.n] = '\0';
}

static void put_err(pctx *p, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));
static void put_err(pctx *p, const char *fmt, va_list ap)
{
    if (p->err && p->errlen > 0)
        vsnprintf(p->err, p->errlen, fmt, ap);
}

/* A message not about the URL's text. */
static int fail_plain(pctx *p, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail_plain(pctx *p, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    put_err(p, fmt, ap);
    va_end(ap);
    return code;
}

/* `malformed url "<safe form>": <reason>`. */
static int fail(pctx *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(pctx *p, const char *fmt, ...)
{
    if (!p->err || p->errlen == 0)
        return DLOCK_EURL;
    char shown[URL_QUOTE_MAX + 1];
    char reason[DL_ERRMSG_MAX];
    safe_form(p->s, shown, sizeof shown);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof reason, fmt, ap);
    va_end(ap);
    snprintf(p->err, p->errlen, "malformed url \"%s\": %s", shown, reason);
    return DLOCK_EURL;
}

/* Decoded text for quoting: bytes a message line should not hold become
 * '?', and long text is cut. */
static const char *printable(const char *s, char *buf, size_t cap)
{
    size_t i = 0;
    for (; s[i] && i + 1 < cap; i++)
        buf[i] = (s[i] >= 0x20 && s[i] < 0x7f) ? s[i] : '?';
    buf[i] = '\0';
    return buf;
}

static int oom(pctx *p)
{
    return fail_plain(p, DLOCK_ENOMEM, "out of memory parsing url");
}

/* ---- pieces ------------------------------------------------------------ */

static char *dup_n(const char *s, size_t n)
{
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    c = (char)tolower((unsigned char)c);
    return (c >= 'a' && c <= 'f') ? c - 'a' + 10 : -1;
}

/*
 * Percent-decode s[0..n) into a new string. `what` names the part for the
 * message (never its content: it may be the password). Control characters
 * are refused except where `allow_ctl` (passwords are opaque bytes).
 */
static int decode(pctx *p, const char *s, size_t n, bool allow_ctl, const char *what,
                  char **out)
{
    char *d = malloc(n + 1);
    if (!d)
        return oom(p);
    size_t j = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '%') {
            int hi = i + 1 < n ? hexval(s[i + 1]) : -1;
            int lo = i + 2 < n ? hexval(s[i + 2]) : -1;
            if (hi < 0 || lo < 0) {
                free(d);
                return fail(p, "bad percent escape in the %s", what);
            }
            c = (unsigned char)(hi << 4 | lo);
            i += 2;
            if (c == 0) {
                free(d);
                return fail(p, "%%00 is not allowed in the %s", what);
            }
        }
        if (!allow_ctl && (c < 0x20 || c == 0x7f)) {
            free(d);
            return fail(p, "control character in the %s", what);
        }
        d[j++] = (char)c;
    }
    d[j] = '\0';
    *out = d;
    return 0;
}

static bool host_char(char c)
{
    return isalnum((unsigned char)c) || c == '-' || c == '.' || c == '_';
}

/* Parse "1".."65535"; the text is after the last '@' so it may be quoted. */
static int parse_port(pctx *p, const char *s, size_t n, const char *host, size_t hlen,
                      int *port)
{
    if (n == 0)
        return fail(p, "empty port after host \"%.*s\"", (int)(hlen > 64 ? 64 : hlen), host);
    long v = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isdigit((unsigned char)s[i]))
            return fail(p, "invalid port \"%.*s\"", (int)(n > 32 ? 32 : n), s);
        if (v <= 65535)
            v = v * 10 + (s[i] - '0');
    }
    if (v < 1 || v > 65535)
        return fail(p, "port %.*s out of range 1-65535", (int)(n > 32 ? 32 : n), s);
    *port = (int)v;
    return 0;
}

/* One host[:port] or [v6]:port entry of the host list. */
static int parse_host(pctx *p, const char *s, size_t n, int defport, bool multi, dl_host *h)
{
    const char *port = NULL;
    size_t plen = 0;
    bool has_port = false;
    char *name = NULL;
    if (n == 0)
        return fail(p, multi ? "empty host in the host list" : "missing host");
    if (s[0] == '[') {
        const char *rb = memchr(s, ']', n);
        if (!rb)
            return fail(p, "unterminated '[' in host");
        size_t alen = (size_t)(rb - s - 1);
        const char *after = rb + 1;
        size_t left = n - (size_t)(after - s);
        if (left > 0) {
            if (*after != ':')
                return fail(p, "unexpected text after ']' in host");
            has_port = true;
            port = after + 1;
            plen = left - 1;
        }
        /* A zone id is written %25zone (RFC 6874); getaddrinfo wants %zone. */
        const char *zone = NULL;
        size_t addrlen = alen;
        for (size_t i = 0; i + 2 < alen; i++) {
            if (s[1 + i] == '%' && s[2 + i] == '2' && s[3 + i] == '5') {
                zone = s + 1 + i + 3;
                addrlen = i;
                break;
            }
        }
        char addr[64];
        if (addrlen == 0 || addrlen >= sizeof addr)
            return fail(p, "invalid ipv6 address in brackets");
        memcpy(addr, s + 1, addrlen);
        addr[addrlen] = '\0';
        struct in6_addr a6;
        if (inet_pton(AF_INET6, addr, &a6) != 1)
            return fail(p, "invalid ipv6 address \"[%s]\"", addr);
        size_t zlen = zone ? (size_t)(s + 1 + alen - zone) : 0;
        if (zone) {
            if (zlen == 0 || zlen > 32)
                return fail(p, "invalid ipv6 zone id");
            for (size_t i = 0; i < zlen; i++)
                if (!host_char(zone[i]))
                    return fail(p, "invalid ipv6 zone id");
        }
        name = malloc(addrlen + (zone ? 1 + zlen : 0) + 1);
        if (!name)
            return oom(p);
        memcpy(name, addr, addrlen);
        if (zone) {
            name[addrlen] = '%';
            memcpy(name + addrlen + 1, zone, zlen);
        }
        name[addrlen + (zone ? 1 + zlen : 0)] = '\0';
    } else {
        const char *colon = memchr(s, ':', n);
        size_t hlen = colon ? (size_t)(colon - s) : n;
        if (colon) {
            if (memchr(colon + 1, ':', n - hlen - 1))
                return fail(p, "ipv6 addresses must be in brackets, e.g. [::1]:%d",
                            defport);
            has_port = true;
            port = colon + 1;
            plen = n - hlen - 1;
        }
        if (hlen == 0)
            return fail(p, multi ? "empty host in the host list" : "missing host");
        if (hlen > HOST_MAX)
            return fail(p, "host name longer than %d bytes", HOST_MAX);
        for (size_t i = 0; i < hlen; i++)
            if (!host_char(s[i]))
                return fail(p, "invalid character '%c' in host \"%.*s\"", s[i],
                            (int)(hlen > 64 ? 64 : hlen), s);
        if (s[0] == '-' || s[0] == '.')
            return fail(p, "invalid host \"%.*s\"", (int)(hlen > 64 ? 64 : hlen), s);
        name = dup_n(s, hlen);
        if (!name)
            return oom(p);
    }
    int portv = defport;
    if (has_port) {
        int rc = parse_port(p, port, plen, name, strlen(name), &portv);
        if (rc) {
            free(name);
            return rc;
        }
    }
    h->host = name;
    h->port = portv;
    return 0;
}

static int parse_hosts(pctx *p, dl_url *u, const scheme_info *si, const char *s, size_t n)
{
    size_t count = 1;
    for (size_t i = 0; i < n; i++)
        count += s[i] == ',';
    if (count > 1 && !si->multi)
        return fail(p, "%s urls take one host, not a list", si->canon);
    if (count > URL_MAX_HOSTS)
        return fail(p, "too many hosts (%zu, max %d)", count, URL_MAX_HOSTS);
    u->hosts = calloc(count, sizeof *u->hosts);
    if (!u->hosts)
        return oom(p);
    const char *end = s + n;
    while (u->nhosts < count) {
        const char *comma = memchr(s, ',', (size_t)(end - s));
        size_t len = comma ? (size_t)(comma - s) : (size_t)(end - s);
        dl_host *h = &u->hosts[u->nhosts];
        int rc = parse_host(p, s, len, si->port, count > 1, h);
        if (rc)
            return rc;
        u->nhosts++;
        /* The same server twice would count twice towards a Redlock quorum. */
        for (size_t i = 0; i + 1 < u->nhosts; i++)
            if (u->hosts[i].port == h->port && strcasecmp(u->hosts[i].host, h->host) == 0)
                return fail(p, "duplicate host \"%s\" port %d", h->host, h->port);
        s += len + 1;
    }
    return 0;
}

/* The query string after '?': k=v pairs in order, duplicates refused. */
static int parse_query(pctx *p, dl_url *u, const char *q)
{
    size_t count = 0;
    for (const char *c = q; *c; c++)
        count += *c == '&';
    count++;
    u->params = calloc(count, sizeof *u->params);
    if (!u->params)
        return oom(p);
    while (*q) {
        size_t seg = strcspn(q, "&");
        if (seg > 0) {
            const char *eq = memchr(q, '=', seg);
            size_t klen = eq ? (size_t)(eq - q) : seg;
            if (klen == 0)
                return fail(p, "query parameter without a name");
            dl_param *pa = &u->params[u->nparams];
            int rc = decode(p, q, klen, false, "query parameter name", &pa->key);
            if (rc)
                return rc;
            rc = eq ? decode(p, eq + 1, seg - klen - 1, false, "query parameter value",
                             &pa->value)
                    : ((pa->value = dup_n("", 0)) ? 0 : oom(p));
            if (rc) {
                free(pa->key);
                pa->key = NULL;
                return rc;
            }
            u->nparams++;
            char shown[65];
            for (size_t i = 0; i + 1 < u->nparams; i++)
                if (strcmp(u->params[i].key, pa->key) == 0)
                    return fail(p, "duplicate query parameter \"%s\"",
                                printable(pa->key, shown, sizeof shown));
        }
        q += seg;
        if (*q == '&')
            q++;
    }
    return 0;
}

/* Scheme-specific meaning of the (decoded) path; replaces u->path. */
static int check_path(pctx *p, dl_url *u, const scheme_info *si)
{
    char *path = u->path; /* decoded, without the leading '/' */
    size_t n = strlen(path);
    char shown[33];
    switch (si->path) {
    case DL_PATH_FILE:
        return 0;
    case DL_PATH_DB:
    case DL_PATH_DB0: {
        if (n == 0)
            return 0;
        long v = 0;
        for (size_t i = 0; i < n; i++) {
            if (!isdigit((unsigned char)path[i]) || v > REDIS_DB_MAX)
                return fail(p, "redis database must be a number 0-%d, got \"%s\"",
                            REDIS_DB_MAX, printable(path, shown, sizeof shown));
            v = v * 10 + (path[i] - '0');
        }
        if (v > REDIS_DB_MAX)
            return fail(p, "redis database must be a number 0-%d, got \"%s\"",
                        REDIS_DB_MAX, printable(path, shown, sizeof shown));
        if (si->path == DL_PATH_DB0 && v != 0)
            return fail(p, "redis cluster has only database 0");
        snprintf(path, n + 1, "%ld", v); /* canonical: "007" -> "7" */
        return 0;
    }
    case DL_PATH_MASTER:
        if (n == 0)
            return fail(p, "redis+sentinel urls need the master name as their path, "
                           "e.g. redis+sentinel://h1:26379,h2:26379/mymaster");
        if (strchr(path, '/'))
            return fail(p, "sentinel master name may not contain '/'");
        return 0;
    case DL_PATH_CHROOT: {
        if (n == 0)
            return 0;
        /* One trailing '/' is a separator ("/app/" is "/app"); any other
         * empty component ("//", "/a//b", "/a//") is a mistake. */
        if (path[n - 1] == '/')
            path[--n] = '\0';
        if (n == 0)
            return fail(p, "zk chroot may not be \"/\" or contain empty components (leave "
                           "the path out for none)");
        /* ZooKeeper refuses empty, "." and ".." path components. */
        for (const char *c = path; c <= path + n;) {
            size_t clen = strcspn(c, "/");
            if (clen == 0 || (clen == 1 && c[0] == '.') ||
                (clen == 2 && c[0] == '.' && c[1] == '.'))
                return fail(p, "zk chroot may not contain empty, \".\" or \"..\" components");
            c += clen + 1;
        }
        /* /zookeeper is the server's own tree (quotas, config): not ours. */
        if (strncmp(path, "zookeeper", 9) == 0 && (path[9] == '\0' || path[9] == '/'))
            return fail(p, "zk chroot may not be /zookeeper or under it (ZooKeeper's own tree)");
        /* Stored with its leading '/', as ZooKeeper writes it. */
        char *withslash = malloc(n + 2);
        if (!withslash)
            return oom(p);
        withslash[0] = '/';
        memcpy(withslash + 1, path, n + 1);
        free(u->path);
        u->path = withslash;
        return 0;
    }
    case DL_PATH_NONE:
        if (n > 0)
            return fail(p, "%s urls take no path", si->canon);
        return 0;
    case DL_PATH_DBNAME:
        return 0;
    }
    return 0;
}

/* A raw '@' past the host part is almost always an unencoded '/', '?' or
 * '@' in a password: refuse rather than show it as a path or parameter. */
static int at_after_host(pctx *p, const char *after)
{
    if (!strchr(after, '@'))
        return 0;
    return fail(p, "'@' after the host part; percent-encode '@', '/' and '?' in "
                   "passwords, paths and parameters (%%40, %%2F, %%3F)");
}

/* file://[localhost]/abs/dir[?params]: `rest` follows "file://". */
static int parse_file(pctx *p, dl_url *u, const char *rest)
{
    size_t hlen = strcspn(rest, "/?");
    if (hlen > 0 && !(hlen == 9 && strncasecmp(rest, "localhost", 9) == 0)) {
        if (memchr(rest, '@', hlen) || memchr(rest, ':', hlen) || hlen > 64)
            return fail(p, "file urls take no user, password or port; use file:///dir");
        return fail(p, "file url host must be empty or localhost, got \"%.*s\"; "
                       "for a directory write file:///%.*s",
                    (int)hlen, rest, (int)hlen, rest);
    }
    const char *path = rest + hlen;
    int rc = at_after_host(p, path);
    if (rc)
        return rc;
    size_t plen = strcspn(path, "?");
    if (plen == 0)
        return fail(p, "file url needs an absolute directory, e.g. file:///var/lib/dlock");
    rc = decode(p, path, plen, false, "path", &u->path);
    if (rc)
        return rc;
    size_t n = strlen(u->path);
    while (n > 1 && u->path[n - 1] == '/')
        u->path[--n] = '\0';
    if (path[plen] == '?')
        return parse_query(p, u, path + plen + 1);
    return 0;
}

/* The URL with the password and secret query values replaced by "***". */
static int build_redacted(pctx *p, dl_url *u, const char *pw, size_t pwlen)
{
    /* Each "***" replaces at least one byte: password plus one per '&'+1. */
    size_t cap = p->len + 1 + 2 * 2;
    for (const char *c = p->s; *c; c++)
        cap += *c == '&' ? 2 : 0;
    char *r = malloc(cap);
    if (!r)
        return oom(p);
    sbuf b = {r, cap, 0, false};
    const char *s = p->s;
    if (pw && pwlen > 0) {
        sb_put(&b, s, (size_t)(pw - s));
        sb_put(&b, "***", 3);
        s = pw + pwlen;
    }
    /* The first '?' past the password starts the query: an earlier one would
     * have ended the host part, leaving an '@' after it, which is refused. */
    const char *q = strchr(s, '?');
    if (q) {
        sb_put(&b, s, (size_t)(q + 1 - s));
        sb_query(&b, q + 1);
    } else {
        sb_put(&b, s, strlen(s));
    }
    r[b.n] = '\0';
    u->redacted = r;
    return 0;
}

static int parse_network(pctx *p, dl_url *u, const scheme_info *si, const char *rest,
                         const char **pw, size_t *pwlen)
{
    size_t alen = strcspn(rest, "/?");
    const char *after = rest + alen;
    int rc = at_after_host(p, after);
    if (rc)
        return rc;
    const char *hosts = rest;
    size_t hlen = alen;
    const char *at = memrchr(rest, '@', alen);
    if (at) {
        const char *colon = memchr(rest, ':', (size_t)(at - rest));
        size_t ulen = colon ? (size_t)(colon - rest) : (size_t)(at - rest);
        if (ulen > 0) {
            rc = decode(p, rest, ulen, false, "user name", &u->user);
            if (rc)
                return rc;
        }
        if (colon && at > colon + 1) {
            *pw = colon + 1;
            *pwlen = (size_t)(at - colon - 1);
            rc = decode(p, *pw, *pwlen, true, "password", &u->password);
            if (rc)
                return rc;
        }
        hosts = at + 1;
        hlen = alen - (size_t)(hosts - rest);
    }
    rc = parse_hosts(p, u, si, hosts, hlen);
    if (rc)
        return rc;
    size_t plen = strcspn(after, "?");
    const char *query = after[plen] == '?' ? after + plen + 1 : NULL;
    const char *path = after;
    if (plen > 0) { /* skip the '/' */
        path++;
        plen--;
    }
    rc = decode(p, path, plen, false, "path", &u->path);
    if (rc)
        return rc;
    rc = check_path(p, u, si);
    if (rc)
        return rc;
    return query ? parse_query(p, u, query) : 0;
}

int dl_url_parse(const char *s, dl_url **out, char *err, size_t errlen)
{
    pctx p = {s, 0, err, errlen};
    if (err && errlen > 0)
        err[0] = '\0';
    if (!out)
        return fail_plain(&p, DLOCK_EINVAL, "no place to store the parsed url");
    *out = NULL;
    if (!s)
        return fail_plain(&p, DLOCK_EURL, "url is missing");
    p.len = strnlen(s, URL_MAX + 1);
    if (p.len > URL_MAX)
        return fail_plain(&p, DLOCK_EURL, "url is longer than %d bytes", URL_MAX);
    if (p.len == 0)
        return fail_plain(&p, DLOCK_EURL, "url is empty");
    /* Before anything quotes the URL: no control bytes in messages. */
    for (size_t i = 0; i < p.len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == 0x7f)
            return fail_plain(&p, DLOCK_EURL,
                              "malformed url: control character 0x%02x at offset %zu", c, i);
        if (c >= 0x80)
            return fail_plain(&p, DLOCK_EURL,
                              "malformed url: non-ascii byte 0x%02x at offset %zu "
                              "(percent-encode it)", c, i);
    }

    const char *sep = strstr(s, "://");
    size_t slen = sep ? (size_t)(sep - s) : 0;
    if (!sep || !scheme_syntax_ok(s, slen)) {
        if (strncasecmp(s, "file:", 5) == 0)
            return fail(&p, "file urls are written file:///absolute/dir");
        return fail(&p, "expected scheme://..., e.g. redis://localhost:6379");
    }
    char scheme[33];
    for (size_t i = 0; i < slen; i++)
        scheme[i] = (char)tolower((unsigned char)s[i]);
    scheme[slen] = '\0';
    const scheme_info *si = scheme_find(scheme);
    if (!si) {
        if (strcmp(scheme, "rediss") == 0)
            return fail_plain(&p, DLOCK_EURL,
                              "url scheme \"rediss\" (redis over tls) is not supported");
        return fail_plain(&p, DLOCK_EURL, "unknown url scheme \"%s\" (known: %s)", scheme,
                          dl_known_schemes());
    }

    dl_url *u = calloc(1, sizeof *u);
    if (!u)
        return oom(&p);
    const char *pw = NULL;
    size_t pwlen = 0;
    int rc = 0;
    u->scheme = strdup(si->canon);
    u->original = strdup(s);
    if (!u->scheme || !u->original)
        rc = oom(&p);
    if (rc == 0)
        rc = si->path == DL_PATH_FILE ? parse_file(&p, u, sep + 3)
                                   : parse_network(&p, u, si, sep + 3, &pw, &pwlen);
    if (rc == 0)
        rc = build_redacted(&p, u, pw, pwlen);
    if (rc) {
        dl_url_free(u);
        return rc;
    }
    *out = u;
    return 0;
}

void dl_url_free(dl_url *u)
{
    if (!u)
        return;
    for (size_t i = 0; i < u->nhosts; i++)
        free(u->hosts[i].host);
    free(u->hosts);
    for (size_t i = 0; i < u->nparams; i++) {
        free(u->params[i].key);
        free(u->params[i].value);
    }
    free(u->params);
    free(u->scheme);
    free(u->user);
    if (u->password) /* do not leave the secret in freed heap memory */
        explicit_bzero(u->password, strlen(u->password));
    free(u->password);
    free(u->path);
    if (u->original)
        explicit_bzero(u->original, strlen(u->original));
    free(u->original);
    free(u->redacted);
    free(u);
}

const char *dl_url_param(const dl_url *u, const char *key)
{
    if (!u || !key)
        return NULL;
    for (size_t i = 0; i < u->nparams; i++)
        if (strcmp(u->params[i].key, key) == 0)
            return u->params[i].value;
    return NULL;
}

/* ---- lock names -------------------------------------------------------- */

static int name_err(char *errbuf, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int name_err(char *errbuf, size_t errlen, const char *fmt, ...)
{
    if (errbuf && errlen > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(errbuf, errlen, fmt, ap);
        va_end(ap);
    }
    return DLOCK_ENAME;
}

DLOCK_EXTERN int dlock_name_valid(const char *name, char *errbuf, size_t errlen)
{
    if (errbuf && errlen > 0)
        errbuf[0] = '\0';
    if (!name)
        return name_err(errbuf, errlen, "lock name is missing");
    size_t n = strnlen(name, DL_NAME_MAX + 1);
    if (n == 0)
        return name_err(errbuf, errlen, "lock name is empty");
    if (n > DL_NAME_MAX)
        return name_err(errbuf, errlen, "lock name is longer than %d bytes", DL_NAME_MAX);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)name[i];
        if (c < 0x20 || c == 0x7f)
            return name_err(errbuf, errlen,
                            "lock name has control character 0x%02x at offset %zu", c, i);
        if (c >= 0x80)
            return name_err(errbuf, errlen,
                            "lock name has non-ascii byte 0x%02x at offset %zu", c, i);
        /* Names become file names and keys: no path separators. */
        if (c == '/' || c == '\\')
            return name_err(errbuf, errlen, "lock name may not contain '%c'", c);
    }
    if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
        return name_err(errbuf, errlen, "lock name may not be \"%s\"", name);
    if (name[0] == '.')
        return name_err(errbuf, errlen, "lock name may not start with '.'");
    if (name[0] == ' ' || name[n - 1] == ' ')
        return name_err(errbuf, errlen, "lock name may not start or end with a space");
    return 0;
}
