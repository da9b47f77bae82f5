/* SPDX-License-Identifier: MIT */
/*
 * json.c — what the etcd backend reads out of the gateway's bytes
 * (ec_json.h): JSON replies and watch streams, the keys and values in them,
 * base64. Fuzzed by fuzz/fuzz_etcd.c, which links this file as it is.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ec_json.h"

/* ---- base64 (the gateway's keys and values) ---------------------------------------- */
/* By hand: neither libcurl nor cJSON exports a codec, and 30 lines spare a
 * dependency on OpenSSL's. */

/* By hand: neither libcurl nor cJSON exports a codec, and 30 lines spare a
 * dependency on OpenSSL's. */

static const char b64c[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* n bytes of s into out (4*ceil(n/3)+1 bytes). */
void ec_b64_encode(const void *s, size_t n, char *out)
{
    const unsigned char *p = s;
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        unsigned v = (unsigned)p[i] << 16;
        if (i + 1 < n)
            v |= (unsigned)p[i + 1] << 8;
        if (i + 2 < n)
            v |= p[i + 2];
        out[o++] = b64c[(v >> 18) & 63];
        out[o++] = b64c[(v >> 12) & 63];
        out[o++] = i + 1 < n ? b64c[(v >> 6) & 63] : '=';
        out[o++] = i + 2 < n ? b64c[v & 63] : '=';
    }
    out[o] = '\0';
}

static int b64_val(char ch)
{
    const char *at = ch ? strchr(b64c, ch) : NULL;
    return at ? (int)(at - b64c) : -1;
}

/* Decode s into out (at most cap-1 bytes, NUL-terminated): the length, or
 * -1 for input that is not base64 or does not fit. */
long ec_b64_decode(const char *s, char *out, size_t cap)
{
    size_t n = strlen(s), o = 0;
    if (n % 4)
        return -1;
    for (size_t i = 0; i < n; i += 4) {
        int v[4];
        for (int j = 0; j < 4; j++) {
            v[j] = s[i + j] == '=' && i + 4 == n && j >= 2 ? 0 : b64_val(s[i + j]);
            if (v[j] < 0)
                return -1;
        }
        if (s[i + 2] == '=' && s[i + 3] != '=')
            return -1;
        unsigned w = (unsigned)v[0] << 18 | (unsigned)v[1] << 12 | (unsigned)v[2] << 6 |
                     (unsigned)v[3];
        int take = s[i + 2] == '=' ? 1 : s[i + 3] == '=' ? 2 : 3;
        if (o + (size_t)take >= cap)
            return -1;
        out[o++] = (char)(w >> 16);
        if (take > 1)
            out[o++] = (char)(w >> 8);
        if (take > 2)
            out[o++] = (char)w;
    }
    out[o] = '\0';
    return (long)o;
}

/* An int64 the gateway writes as a string ("12") or a number; def if absent. */
int64_t ec_jint(const cJSON *o, const char *name, int64_t def)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    if (cJSON_IsString(v) && v->valuestring[0]) {
        char *end;
        errno = 0;
        long long x = strtoll(v->valuestring, &end, 10);
        return errno || *end ? def : (int64_t)x;
    }
    /* (the range test keeps a huge or NaN number from being undefined) */
    if (cJSON_IsNumber(v) && v->valuedouble >= -9.2e18 && v->valuedouble <= 9.2e18)
        return (int64_t)v->valuedouble;
    return def;
}

/* A uint64 the gateway writes as a string (member ids use all 64 bits); 0
 * if absent or malformed. */
uint64_t ec_juint(const cJSON *o, const char *name)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!cJSON_IsString(v) || v->valuestring[0] < '0' || v->valuestring[0] > '9')
        return 0;
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v->valuestring, &end, 10);
    return errno || *end ? 0 : (uint64_t)x;
}

const cJSON *ec_jobj(const cJSON *o, const char *name)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    return cJSON_IsObject(v) ? v : NULL;
}

const cJSON *ec_jarr(const cJSON *o, const char *name)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    return cJSON_IsArray(v) ? v : NULL;
}

/* A kv's key, decoded into buf: false when absent or malformed. */
bool ec_kv_key(const cJSON *kv, char *buf, size_t len)
{
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(kv, "key");
    return cJSON_IsString(k) && ec_b64_decode(k->valuestring, buf, len) >= 0;
}

/* A kv's value, decoded into buf ("" when absent). */
void ec_kv_value(const cJSON *kv, char *buf, size_t len)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(kv, "value");
    if (!cJSON_IsString(v) || ec_b64_decode(v->valuestring, buf, len) < 0)
        buf[0] = '\0';
}

/* ---- replies --------------------------------------------------------------------- */

/* An error reply of the gateway ({"error": ..., "code": N, "message": ...})
 * as a DLOCK_E* code and a message. */
static const char *ec_gateway_message(const cJSON *j)
{
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(j, "message");
    if (!cJSON_IsString(m))
        m = cJSON_GetObjectItemCaseSensitive(j, "error");
    return cJSON_IsString(m) && ec_jint(j, "code", -1) >= 0 ? m->valuestring : NULL;
}

/* Is a reply with HTTP status and body j (NULL: not JSON) etcd's at all?
 * Its replies are JSON objects; a success carries a header (a stream's
 * line, inside its result), an error a message and a code (a stream's
 * line, an error object with a message). */
bool ec_from_etcd(long status, const cJSON *j)
{
    if (!cJSON_IsObject(j))
        return false;
    if (status != 200)
        return ec_gateway_message(j) != NULL;
    return ec_jobj(j, "header") || ec_jobj(ec_jobj(j, "result"), "header") ||
           cJSON_IsString(cJSON_GetObjectItemCaseSensitive(ec_jobj(j, "error"), "message"));
}

int ec_gateway_error(const char *base, long status, const cJSON *j, char *err, size_t errlen)
{
    const char *msg = ec_gateway_message(j);
    int code = (int)ec_jint(j, "code", -1);
    if (!msg) {
        snprintf(err, errlen, "%s answers HTTP %ld without an etcd error: not an etcd v3 gateway?",
                 base, status);
        return DLOCK_EPROTO;
    }
    if (strstr(msg, "no leader") || strstr(msg, "request timed out") ||
        strstr(msg, "leader changed") || strstr(msg, "too many requests")) {
        snprintf(err, errlen, "etcd has no leader, or lost its quorum (%.200s)", msg);
        return DLOCK_EUNREACHABLE;
    }
    if (strstr(msg, "user name is empty")) {
        snprintf(err, errlen, "etcd has authentication on: give user:password@ in the URL (%.200s)",
                 msg);
        return DLOCK_EPERM;
    }
    if (strstr(msg, "lease not found")) {
        snprintf(err, errlen, "the client's lease is gone (%.200s)", msg);
        return DLOCK_ELOST;
    }
    snprintf(err, errlen, "etcd: %.300s", msg);
    if (code == 16 || code == 7 || strstr(msg, "auth") || strstr(msg, "permission denied"))
        return DLOCK_EPERM;
    if (code == 14 || code == 4)
        return DLOCK_EUNREACHABLE;
    return DLOCK_EPROTO;
}

/* The header revision of a reply (0 if absent). */
int64_t ec_header_rev(const cJSON *j)
{
    return ec_jint(ec_jobj(j, "header"), "revision", 0);
}

/* A value as value_format wrote it: the holder into holder, when it got
 * the lock into *since_ms (-1 unknown), the leader value returned (NULL
 * if none). */
const char *ec_split_value(char *v, char *holder, size_t len, int64_t *since_ms)
{
    char *nl = strchr(v, '\n');
    if (nl)
        *nl = '\0';
    char *end;
    long long since = strtoll(v, &end, 10);
    bool stamped = end != v && *end == ' ';
    if (since_ms)
        *since_ms = stamped ? since : -1;
    if (holder)
        snprintf(holder, len, "%s", stamped ? end + 1 : v);
    return nl && nl[1] ? nl + 1 : NULL;
}

/* ---- the queue ------------------------------------------------------------------- */

/* "PREFIX/NAME/KIND-LEASE-OWNER" → the entry's kind (false for another shape). */
bool ec_entry_parse(const char *dir, const char *key, ec_entry *e)
{
    size_t dl = strlen(dir);
    if (strncmp(key, dir, dl) != 0)
        return false;
    const char *p = dl_qkind_parse(key + dl, &e->pos);
    if (!p || *p != '-' || strlen(p + 1) != 16 + 1 + DL_OWNER_HEX || p[17] != '-')
        return false;
    snprintf(e->key, sizeof e->key, "%s", key);
    return true;
}

/* The lease id in an entry's key. */
int64_t ec_entry_lease(const char *dir, const char *key)
{
    const char *p = strchr(key + strlen(dir), '-');
    return p ? (int64_t)strtoull(p + 1, NULL, 16) : 0;
}

/* The queue in a range reply's kvs, ascending by create revision. */
int ec_queue_of(const cJSON *range, const char *dir, bool descending, ec_entry **out)
{
    return ec_queue_read(range, dir, descending, false, out, NULL, 0);
}

int ec_queue_read(const cJSON *range, const char *dir, bool descending, bool any_key,
                  ec_entry **out, char *foreign, size_t flen)
{
    const cJSON *kvs = ec_jarr(range, "kvs");
    int n = cJSON_GetArraySize(kvs), m = 0;
    ec_entry *q = calloc((size_t)(n ? n : 1), sizeof *q);
    if (!q)
        return -1;
    if (foreign && flen)
        foreign[0] = '\0';
    size_t dl = strlen(dir);
    const cJSON *kv;
    cJSON_ArrayForEach(kv, kvs)
    {
        char key[EC_KEY_MAX];
        if (!ec_kv_key(kv, key, sizeof key) || strncmp(key, dir, dl) != 0)
            continue;
        /* (a peer's rule: whatever the key, as the peer sees it) */
        bool ok = any_key || ec_entry_parse(dir, key, &q[m]);
        if (any_key) {
            q[m].pos = (dl_qpos){.kind = 'x', .permits = 1};
            snprintf(q[m].key, sizeof q[m].key, "%s", key);
        }
        if (!ok) {
            if (foreign && flen && !foreign[0])
                snprintf(foreign, flen, "%s", key);
            continue;
        }
        q[m].rev = ec_jint(kv, "create_revision", 0);
        q[m].lease = ec_jint(kv, "lease", 0);
        m++;
    }
    if (descending)
        for (int i = 0; i < m / 2; i++) {
            ec_entry t = q[i];
            q[i] = q[m - 1 - i];
            q[m - 1 - i] = t;
        }
    *out = q;
    return m;
}

bool ec_mutex_shaped(const char *dir, const char *key)
{
    size_t dl = strlen(dir);
    if (strncmp(key, dir, dl) != 0 || !key[dl])
        return false;
    size_t hex = strspn(key + dl, "0123456789abcdef");
    return hex > 0 && hex <= 16 && !key[dl + hex];
}

/* ---- streams ----------------------------------------------------------------------- */

size_t ec_body_feed(ec_body *k, const char *data, size_t n)
{
    if (k->len + n + 1 > k->cap) {
        if (k->len + n + 1 > EC_REPLY_MAX) {
            k->toolarge = true;
            return 0; /* aborts the transfer */
        }
        size_t cap = k->cap ? k->cap : 4096;
        while (cap < k->len + n + 1)
            cap *= 2;
        char *b = realloc(k->buf, cap);
        if (!b)
            return 0;
        k->buf = b;
        k->cap = cap;
    }
    memcpy(k->buf + k->len, data, n);
    k->len += n;
    k->buf[k->len] = '\0';
    if (k->on_line) {
        char *nl, *start = k->buf;
        while ((nl = memchr(start, '\n', k->len - (size_t)(start - k->buf)))) {
            *nl = '\0';
            cJSON *j = cJSON_Parse(start);
            k->on_line(k->arg, j); /* NULL for a line that is not JSON */
            cJSON_Delete(j);
            start = nl + 1;
        }
        k->len -= (size_t)(start - k->buf);
        memmove(k->buf, start, k->len);
        k->buf[k->len] = '\0';
    }
    return n;
}

void ec_wait_line(void *arg, cJSON *j)
{
    wait_watch *w = arg;
    const cJSON *r = ec_jobj(j, "result");
    if (!r) {
        const cJSON *e = ec_jobj(j, "error");
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(e ? e : j, "message");
        snprintf(w->why, sizeof w->why, "%s", cJSON_IsString(m) ? m->valuestring : "not JSON");
        w->failed = true;
        return;
    }
    const cJSON *ev;
    cJSON_ArrayForEach(ev, ec_jarr(r, "events"))
    {
        int64_t mod = ec_jint(ec_jobj(ev, "kv"), "mod_revision", 0);
        /* A watch starts at its member's revision, which a member that is
         * behind (just restarted) has below our read's: what it replays up
         * to that read is in the read already. (Taken for news, the
         * predecessor's creation read as "it holds", and its going then let
         * a waiter in past the holder: an overlap after a member restart.) */
        if (mod <= w->read_rev)
            continue;
        if (mod > w->ev_rev)
            w->ev_rev = mod;
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(ev, "type");
        char key[EC_KEY_MAX];
        bool del = cJSON_IsString(t) && strcmp(t->valuestring, "DELETE") == 0;
        bool on_pred = w->pred && ec_kv_key(ec_jobj(ev, "kv"), key, sizeof key) &&
                       strcmp(key, w->pred) == 0;
        if (on_pred && !del && w->chain &&
            ec_jint(ec_jobj(ev, "kv"), "create_revision", 0) < mod) {
            w->pred_held = true; /* it holds, so it is first: wait on for its going */
            continue;
        }
        if (on_pred && del)
            w->pred_gone = true;
        else
            w->other = true;
        w->fired = w->stop = true;
    }
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "canceled")))
        w->fired = w->stop = w->other = true; /* the watch is gone; read again */
    else if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "created"))) {
        int64_t rev = ec_header_rev(r);
        if (rev > w->at_rev)
            w->at_rev = rev;
        if (++w->created == 2)
            w->stop = true;
    }
}
