/* SPDX-License-Identifier: MIT */
/*
 * sql.c — what the SQL backends (postgres, mysql) share beyond hex: their
 * statements, formatted once at open with the client's table names, a
 * name prefix as a LIKE pattern for dlock list, and a claim's row read.
 */
#include "support/support.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

char *dl_fmt_alloc(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *s = NULL;
    if (vasprintf(&s, fmt, ap) < 0)
        s = NULL;
    va_end(ap);
    return s;
}

void dl_like_prefix(const char *prefix, char *pat, size_t len)
{
    size_t j = 0;
    for (const char *s = prefix ? prefix : ""; *s && j + 3 < len; s++) {
        if (*s == '%' || *s == '_' || *s == '\\')
            pat[j++] = '\\';
        pat[j++] = *s;
    }
    pat[j++] = '%';
    pat[j] = '\0';
}

int dl_sql_claim_read(dlock_client *c, const char *key, const char *hex, const char *ver_s,
                      char **val, size_t *len, uint64_t *ver)
{
    if (!hex)
        return 0; /* none */
    char *end = NULL;
    *ver = ver_s ? strtoull(ver_s, &end, 10) : 0;
    int rc = !ver_s || *end || *ver == 0 ? DLOCK_EPROTO : dl_hex_decode(hex, val, len);
    if (rc)
        return dl_claim_err(c, rc, "reading", key,
                            rc == DLOCK_ENOMEM ? "out of memory"
                                               : "the server sent no hex, or no version");
    return 0;
}
