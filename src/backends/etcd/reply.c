/* SPDX-License-Identifier: MIT */
/*
 * reply.c — the reader of an HTTP/1.1 reply, for the etcd backend's own
 * transport of http:// endpoints (conn.c; https:// stays libcurl's).
 *
 * Written by hand: loading libcurl cost every `dlock run` on etcd about
 * 8 ms of CPU (thirty-odd libraries mapped and relocated; the run's own
 * work is under 2 ms), and the only HTTP parser Debian 12 packages for C
 * is node's http-parser, archived upstream since 2022. What the gateway
 * sends is a small part of HTTP: a status line, headers of which three
 * matter (Content-Length, Transfer-Encoding: chunked, Connection), a body
 * by length, in chunks, or up to the close. Pure: the fuzz target links
 * it as it is (fuzz_http).
 */
#include "ec_json.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

enum {
    RS_STATUS,     /* the status line */
    RS_HEADER,     /* a header line, or the empty line that ends them */
    RS_BODY,       /* body bytes by Content-Length: left */
    RS_BODY_EOF,   /* body bytes up to the close */
    RS_CHUNK_SIZE, /* a chunk's size line */
    RS_CHUNK_DATA, /* a chunk's bytes: left */
    RS_CHUNK_END,  /* the CRLF after a chunk */
    RS_TRAILER,    /* trailer lines up to the empty one */
};

void ec_reply_init(ec_reply *r)
{
    memset(r, 0, sizeof *r);
    r->state = RS_STATUS;
}

static int bad(ec_reply *r, const char *why)
{
    snprintf(r->why, sizeof r->why, "%s", why);
    r->result = EC_REPLY_BAD;
    return EC_REPLY_BAD;
}

static int done(ec_reply *r)
{
    r->result = EC_REPLY_DONE;
    return EC_REPLY_DONE;
}

/* Does the comma-separated list v hold token t (case-insensitive)? */
static bool has_token(const char *v, const char *t)
{
    size_t tl = strlen(t);
    while (*v) {
        while (*v == ' ' || *v == '\t' || *v == ',')
            v++;
        const char *e = v;
        while (*e && *e != ',')
            e++;
        const char *te = e;
        while (te > v && (te[-1] == ' ' || te[-1] == '\t'))
            te--;
        if ((size_t)(te - v) == tl && strncasecmp(v, t, tl) == 0)
            return true;
        v = e;
    }
    return false;
}

/* Digits (base 10 or 16) of s up to its end or a stop character: false on
 * none, on another character, or above 2^62. */
static bool number(const char *s, int base, const char *stops, uint64_t *out)
{
    uint64_t v = 0;
    const char *p = s;
    for (; *p && !strchr(stops, *p); p++) {
        int d = *p >= '0' && *p <= '9'   ? *p - '0'
                : base == 16 && *p >= 'a' && *p <= 'f' ? *p - 'a' + 10
                : base == 16 && *p >= 'A' && *p <= 'F' ? *p - 'A' + 10
                                                       : -1;
        if (d < 0 || v > ((uint64_t)1 << 62) / (uint64_t)base)
            return false;
        v = v * (uint64_t)base + (uint64_t)d;
    }
    if (p == s)
        return false;
    *out = v;
    return true;
}

static int status_line(ec_reply *r, const char *s)
{
    /* HTTP/1.1 200 OK */
    if (strncmp(s, "HTTP/1.", 7) != 0 || (s[7] != '0' && s[7] != '1') || s[8] != ' ')
        return bad(r, "not an HTTP/1.x status line");
    int st = 0;
    for (int i = 9; i < 12; i++) {
        if (s[i] < '0' || s[i] > '9')
            return bad(r, "no status code");
        st = st * 10 + s[i] - '0';
    }
    if (s[12] != '\0' && s[12] != ' ')
        return bad(r, "no status code");
    if (st < 100)
        return bad(r, "a status code below 100");
    if (st == 101)
        return bad(r, "the server switched protocols");
    r->status = st;
    r->http10 = s[7] == '0';
    r->close = r->http10; /* 1.0: closed after the reply, unless keep-alive */
    r->chunked = r->has_len = false;
    r->state = RS_HEADER;
    return EC_REPLY_MORE;
}

static int header_line(ec_reply *r, char *s)
{
    if (*s == ' ' || *s == '\t')
        return bad(r, "a folded header line");
    char *colon = strchr(s, ':');
    if (!colon || colon == s)
        return bad(r, "a header line without a name");
    *colon = '\0';
    char *v = colon + 1;
    while (*v == ' ' || *v == '\t')
        v++;
    size_t vl = strlen(v);
    while (vl && (v[vl - 1] == ' ' || v[vl - 1] == '\t'))
        v[--vl] = '\0';
    if (strcasecmp(s, "Content-Length") == 0) {
        uint64_t n;
        if (!number(v, 10, "", &n))
            return bad(r, "a Content-Length that is not a number");
        if (r->has_len && n != r->length)
            return bad(r, "two different Content-Lengths");
        r->has_len = true;
        r->left = r->length = n;
    } else if (strcasecmp(s, "Transfer-Encoding") == 0) {
        /* chunked must be the last coding, and no other is asked for */
        if (!has_token(v, "chunked") || strcasecmp(v, "chunked") != 0)
            return bad(r, "a Transfer-Encoding other than chunked");
        r->chunked = true;
    } else if (strcasecmp(s, "Connection") == 0) {
        if (has_token(v, "close"))
            r->close = true;
        else if (has_token(v, "keep-alive") && r->http10)
            r->close = false;
    }
    return EC_REPLY_MORE;
}

/* The empty line after the headers: what the body is. */
static int headers_end(ec_reply *r)
{
    if (r->status < 200) { /* 1xx: informational, the reply follows */
        r->state = RS_STATUS;
        return EC_REPLY_MORE;
    }
    if (r->status == 204 || r->status == 304)
        return done(r);
    if (r->chunked) {
        r->has_len = false; /* (chunked wins, RFC 9112 6.3) */
        r->state = RS_CHUNK_SIZE;
        return EC_REPLY_MORE;
    }
    if (r->has_len) {
        r->state = RS_BODY;
        return r->left ? EC_REPLY_MORE : done(r);
    }
    r->close = true;
    r->state = RS_BODY_EOF;
    return EC_REPLY_MORE;
}

/* A complete line (without its CRLF) in the current state. */
static int line(ec_reply *r, char *s)
{
    switch (r->state) {
    case RS_STATUS:
        if (!*s && !r->status)
            return EC_REPLY_MORE; /* (a stray CRLF before the reply) */
        return status_line(r, s);
    case RS_HEADER:
        return *s ? header_line(r, s) : headers_end(r);
    case RS_CHUNK_SIZE: {
        uint64_t n;
        if (!number(s, 16, "; \t", &n))
            return bad(r, "a chunk size that is not a number");
        r->left = n;
        r->state = n ? RS_CHUNK_DATA : RS_TRAILER;
        return EC_REPLY_MORE;
    }
    case RS_CHUNK_END:
        if (*s)
            return bad(r, "a chunk longer than its size");
        r->state = RS_CHUNK_SIZE;
        return EC_REPLY_MORE;
    case RS_TRAILER:
        return *s ? EC_REPLY_MORE : done(r);
    default:
        return bad(r, "a line where body bytes were expected");
    }
}

int ec_reply_feed(ec_reply *r, const char *data, size_t n, size_t *used,
                  bool (*sink)(void *arg, const char *data, size_t n), void *arg)
{
    size_t i = 0;
    int rc = r->result;
    while (rc == EC_REPLY_MORE && i < n) {
        if (r->state == RS_BODY || r->state == RS_CHUNK_DATA || r->state == RS_BODY_EOF) {
            size_t take = n - i;
            if (r->state != RS_BODY_EOF && take > r->left)
                take = (size_t)r->left;
            if (!sink(arg, data + i, take)) {
                r->result = rc = EC_REPLY_SINK;
                break;
            }
            i += take;
            if (r->state == RS_BODY_EOF)
                continue;
            r->left -= take;
            if (r->left == 0)
                rc = r->state == RS_BODY ? done(r) : (r->state = RS_CHUNK_END, EC_REPLY_MORE);
            continue;
        }
        char c = data[i++];
        if (c == '\n') {
            size_t l = r->line_len;
            if (l && r->line[l - 1] == '\r')
                l--;
            r->line[l] = '\0';
            r->line_len = 0;
            if (memchr(r->line, '\0', l))
                rc = bad(r, "a NUL byte in a header");
            else
                rc = line(r, r->line);
            continue;
        }
        if (r->line_len + 1 >= sizeof r->line) {
            rc = bad(r, "a header line longer than 8 KiB");
            break;
        }
        r->line[r->line_len++] = c;
    }
    *used = i;
    return rc;
}

int ec_reply_eof(ec_reply *r)
{
    if (r->result != EC_REPLY_MORE)
        return r->result;
    if (r->state == RS_BODY_EOF)
        return done(r);
    return bad(r, r->state == RS_STATUS && !r->status && !r->line_len
                      ? "the connection closed before any reply"
                      : "the connection closed before the reply ended");
}
