/* SPDX-License-Identifier: MIT */
/*
 * format.c — the file backend's parsers of what a lock file holds (its
 * header and its holders' records), apart from the locking so that
 * fuzz/fuzz_file.c can feed them anything a file could contain.
 */
#include "file_int.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* 20 digits; false for anything else, or for a number above 2^64 - 1
 * (read modulo 2^64, a token field could go back: fuzz_file found it). */
static bool parse_digits(const char *p, uint64_t *v)
{
    uint64_t x = 0;
    for (int i = 0; i < 20; i++) {
        if (p[i] < '0' || p[i] > '9')
            return false;
        uint64_t d = (uint64_t)(p[i] - '0');
        if (x > (UINT64_MAX - d) / 10)
            return false;
        x = x * 10 + d;
    }
    *v = x;
    return true;
}

bool fh_parse_header(const char *buf, size_t n, uint64_t *token, uint64_t *next, bool *split)
{
    *token = *next = 0;
    *split = false;
    if (n == 0)
        return true;
    if (n > HEADER_LEN)
        n = HEADER_LEN;
    *split = n >= TOKEN_LEN && memcmp(buf, MAGIC, 7) == 0;
    bool ok = n >= TOKEN_LEN && (*split || memcmp(buf, MAGIC_OLD, 7) == 0) &&
              buf[TOKEN_LEN - 1] == '\n' && parse_digits(buf + 7, token);
    if (ok && n == HEADER_LEN)
        ok = memcmp(buf + TOKEN_LEN, "next ", 5) == 0 && buf[HEADER_LEN - 1] == '\n' &&
             parse_digits(buf + TOKEN_LEN + 5, next);
    if (!ok)
        *split = false;
    return ok;
}

void fh_format_header(char buf[HEADER_LEN + 1], uint64_t token, uint64_t next)
{
    snprintf(buf, HEADER_LEN + 1, MAGIC "%020" PRIu64 "\nnext %020" PRIu64 "\n", token, next);
}

void fh_parse_record(const char *data, size_t n, fh_record *r)
{
    char rec[RECORD_LEN + 1];
    memset(r, 0, sizeof *r);
    if (n > RECORD_LEN)
        n = RECORD_LEN;
    if (n == 0 || data[0] != 'o')
        return;
    memcpy(rec, data, n);
    rec[n] = '\0';
    char *p = strstr(rec, "\nholder ");
    if (p) {
        p += 8;
        size_t w = strcspn(p, "\n");
        if (w >= sizeof r->holder)
            w = sizeof r->holder - 1;
        memcpy(r->holder, p, w);
        r->holder[w] = '\0';
    }
    if ((p = strstr(rec, "\nsince ")))
        r->since = strtoll(p + 7, NULL, 10);
    if ((p = strstr(rec, "\ntoken ")))
        r->token = strtoull(p + 7, NULL, 10);
    if ((p = strstr(rec, "\nvalue "))) {
        char *end;
        unsigned long len = strtoul(p + 7, &end, 10);
        if (*end == ':' && len < sizeof r->value && end + 1 + len <= rec + n) {
            memcpy(r->value, end + 1, len);
            r->value[len] = '\0';
        }
    }
    r->present = true;
}

void fh_format_record(char rec[RECORD_LEN], const char *owner, const char *holder,
                      int64_t since_ms, uint64_t token, const char *value)
{
    memset(rec, 0, RECORD_LEN);
    snprintf(rec, RECORD_LEN, "owner %s\nholder %s\nsince %" PRId64 "\ntoken %" PRIu64
             "\nvalue %zu:%s\n",
             owner, holder, since_ms, token, value ? strlen(value) : 0, value ? value : "");
}
