/* SPDX-License-Identifier: MIT */
/*
 * claim_rec.c — a claim's record: "dlock-claim 1\n", then one "key value\n"
 * line per field in any order (unknown keys are skipped, so that a later
 * version may add some), and last "result N\n" followed by exactly N bytes.
 * Every field is bounded; a record that breaks a bound is not one.
 */
#include "claim_rec.h"

#include <errno.h>
#include <stdbool.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAGIC "dlock-claim 1\n"

int dl_claim_fingerprint_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > DLOCK_FINGERPRINT_MAX)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (s[i] < 0x20 || s[i] > 0x7e)
            return 0;
    return 1;
}

static const char *state_word(dl_rec_state s)
{
    return s == DL_REC_DONE ? "done" : s == DL_REC_ABANDONED ? "abandoned" : "running";
}

int dl_claim_rec_format(const dl_claim_rec *r, char **out, size_t *len)
{
    *out = NULL;
    if (r->result_len > DLOCK_CLAIM_RESULT_MAX)
        return DLOCK_EINVAL;
    /* Text fields never hold a newline: `by` is dl_self_desc's, the
     * fingerprint and owner are checked printable; cleaned anyway. */
    char by[sizeof r->by];
    snprintf(by, sizeof by, "%s", r->by);
    for (char *p = by; *p; p++)
        if ((unsigned char)*p < 0x20)
            *p = '?';
    char head[1024];
    int n = snprintf(head, sizeof head,
                     MAGIC "state %s\nattempt %u\nstatus %d\nstarted_ms %lld\nfinished_ms %lld\n"
                           "token %" PRIu64 "\nby %s\nowner %s\nfingerprint %s\nresult %zu\n",
                     state_word(r->state), r->attempt, r->status, r->started_ms, r->finished_ms,
                     r->token, by, r->owner, r->fingerprint, r->result_len);
    if (n < 0 || (size_t)n >= sizeof head)
        return DLOCK_EINVAL;
    char *b = malloc((size_t)n + r->result_len + 1);
    if (!b)
        return DLOCK_ENOMEM;
    memcpy(b, head, (size_t)n);
    if (r->result_len)
        memcpy(b + n, r->result, r->result_len);
    b[(size_t)n + r->result_len] = '\0';
    *out = b;
    *len = (size_t)n + r->result_len;
    return 0;
}

/* A decimal in [min, max] taking all of s. */
static int num(const char *s, long long min, long long max, long long *v)
{
    if (!*s || (*s != '-' && (*s < '0' || *s > '9')))
        return 0;
    char *end;
    errno = 0;
    long long x = strtoll(s, &end, 10);
    if (errno || *end || x < min || x > max)
        return 0;
    *v = x;
    return 1;
}

static int text(const char *s, char *dst, size_t cap)
{
    size_t n = strlen(s);
    if (n >= cap)
        return 0;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
            return 0;
    memcpy(dst, s, n + 1);
    return 1;
}

#define BAD(...) (snprintf(why, whylen, __VA_ARGS__), DLOCK_EPROTO)

int dl_claim_rec_parse(const char *buf, size_t len, dl_claim_rec *r, char *why, size_t whylen)
{
    memset(r, 0, sizeof *r);
    size_t ml = strlen(MAGIC);
    if (len < ml || memcmp(buf, MAGIC, ml) != 0)
        return BAD("it does not start with \"dlock-claim 1\"");
    size_t pos = ml;
    bool have_state = false, have_attempt = false;
    for (;;) {
        const char *nl = memchr(buf + pos, '\n', len - pos);
        if (!nl)
            return BAD("it ends before its result line");
        size_t ll = (size_t)(nl - (buf + pos));
        char line[512];
        if (ll >= sizeof line)
            return BAD("a line of %zu bytes (at most %zu)", ll, sizeof line - 1);
        memcpy(line, buf + pos, ll);
        line[ll] = '\0';
        if (memchr(line, '\0', ll))
            return BAD("a line holds a NUL byte");
        pos += ll + 1;
        char *sp = strchr(line, ' ');
        const char *val = sp ? sp + 1 : "";
        if (sp)
            *sp = '\0';
        long long v;
        if (strcmp(line, "state") == 0) {
            if (strcmp(val, "running") == 0)
                r->state = DL_REC_RUNNING;
            else if (strcmp(val, "done") == 0)
                r->state = DL_REC_DONE;
            else if (strcmp(val, "abandoned") == 0)
                r->state = DL_REC_ABANDONED;
            else
                return BAD("unknown state");
            have_state = true;
        } else if (strcmp(line, "attempt") == 0) {
            if (!num(val, 1, UINT_MAX, &v))
                return BAD("attempt is not a number from 1");
            r->attempt = (unsigned)v;
            have_attempt = true;
        } else if (strcmp(line, "status") == 0) {
            if (!num(val, INT_MIN, INT_MAX, &v))
                return BAD("status is not a number");
            r->status = (int)v;
        } else if (strcmp(line, "started_ms") == 0) {
            if (!num(val, 0, LLONG_MAX, &r->started_ms))
                return BAD("started_ms is not a time");
        } else if (strcmp(line, "finished_ms") == 0) {
            if (!num(val, 0, LLONG_MAX, &r->finished_ms))
                return BAD("finished_ms is not a time");
        } else if (strcmp(line, "token") == 0) {
            char *end;
            errno = 0;
            unsigned long long t = strtoull(val, &end, 10);
            if (!*val || *val == '-' || errno || *end)
                return BAD("token is not a number");
            r->token = t;
        } else if (strcmp(line, "by") == 0) {
            if (!text(val, r->by, sizeof r->by))
                return BAD("by is too long or not text");
        } else if (strcmp(line, "owner") == 0) {
            if (!text(val, r->owner, sizeof r->owner))
                return BAD("owner is too long or not text");
        } else if (strcmp(line, "fingerprint") == 0) {
            if (!text(val, r->fingerprint, sizeof r->fingerprint))
                return BAD("fingerprint is too long or not text");
        } else if (strcmp(line, "result") == 0) {
            if (!num(val, 0, DLOCK_CLAIM_RESULT_MAX, &v))
                return BAD("result length is not a number up to %d", DLOCK_CLAIM_RESULT_MAX);
            if ((size_t)v != len - pos)
                return BAD("result of %lld bytes, %zu follow", v, len - pos);
            break;
        } /* else: a later version's field */
    }
    if (!have_state || !have_attempt)
        return BAD("it has no %s", have_state ? "attempt" : "state");
    r->result_len = len - pos;
    r->result = malloc(r->result_len + 1);
    if (!r->result)
        return DLOCK_ENOMEM;
    memcpy(r->result, buf + pos, r->result_len);
    r->result[r->result_len] = '\0';
    return 0;
}

void dl_claim_rec_free(dl_claim_rec *r)
{
    free(r->result);
    r->result = NULL;
    r->result_len = 0;
}
