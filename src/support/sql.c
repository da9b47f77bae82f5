/* SPDX-License-Identifier: MIT */
/*
 * sql.c — what the SQL backends (postgres, mysql) share beyond hex: their
 * statements, formatted once at open with the client's table names, and
 * a name prefix as a LIKE pattern for dlock list.
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
