/* SPDX-License-Identifier: MIT */
/*
 * hex.c — bytes as hex digits and back, for the SQL backends' claim
 * records: a bound text parameter cannot carry a NUL byte, and the
 * servers' own decode()/UNHEX() turn the digits back into bytes.
 */
#include "support/support.h"

#include <stdlib.h>
#include <string.h>

void dl_hex_encode(const void *s, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    const unsigned char *p = s;
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[p[i] >> 4];
        out[2 * i + 1] = digits[p[i] & 15];
    }
    out[2 * n] = '\0';
}

static int nibble(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

int dl_hex_decode(const char *s, char **out, size_t *len)
{
    *out = NULL;
    size_t n = strlen(s);
    if (n % 2)
        return DLOCK_EPROTO;
    char *b = malloc(n / 2 + 1);
    if (!b)
        return DLOCK_ENOMEM;
    for (size_t i = 0; i < n / 2; i++) {
        int hi = nibble(s[2 * i]), lo = nibble(s[2 * i + 1]);
        if (hi < 0 || lo < 0) {
            free(b);
            return DLOCK_EPROTO;
        }
        b[i] = (char)(hi << 4 | lo);
    }
    b[n / 2] = '\0';
    *out = b;
    *len = n / 2;
    return 0;
}
