/* SPDX-License-Identifier: MIT */
/*
 * proto.c — memcached's meta protocol replies and the lock item's value
 * (mc_proto.h), fuzzed by fuzz/fuzz_memcached.c.
 */
#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "mc_proto.h"

long mc_parse(const char *buf, size_t len, mc_reply *r)
{
    const char *eol = memchr(buf, '\n', len < 8192 ? len : 8192);
    if (!eol)
        return len >= 8192 ? -1 : 0;
    size_t ll = (size_t)(eol - buf);
    if (ll == 0 || buf[ll - 1] != '\r')
        return -1;
    ll--; /* without \r */
    memset(r, 0, sizeof *r);
    r->ttl = -1;
    for (size_t i = 0; i < ll; i++)
        if ((unsigned char)buf[i] < 0x20 || (unsigned char)buf[i] == 0x7f)
            return -1;
    static const char *const errs[] = {"ERROR", "CLIENT_ERROR", "SERVER_ERROR"};
    for (size_t i = 0; i < sizeof errs / sizeof errs[0]; i++) {
        size_t n = strlen(errs[i]);
        if (ll >= n && memcmp(buf, errs[i], n) == 0 && (ll == n || buf[n] == ' ')) {
            memcpy(r->code, "ER", 3);
            size_t m = ll < sizeof r->error - 1 ? ll : sizeof r->error - 1;
            memcpy(r->error, buf, m);
            r->error[m] = '\0';
            return (long)(ll + 2);
        }
    }
    if (ll >= 8 && memcmp(buf, "VERSION ", 8) == 0) {
        memcpy(r->code, "VE", 3);
        return (long)(ll + 2);
    }
    if (ll < 2 || (ll > 2 && buf[2] != ' '))
        return -1;
    static const char codes[] = "HD NS EX NF EN VA MN";
    bool known = false;
    for (size_t i = 0; i + 2 <= sizeof codes - 1; i += 3)
        if (buf[0] == codes[i] && buf[1] == codes[i + 1])
            known = true;
    if (!known)
        return -1;
    r->code[0] = buf[0];
    r->code[1] = buf[1];
    size_t p = 2;
    bool va = buf[0] == 'V' && buf[1] == 'A';
    long long vsize = -1;
    /* tokens: VA's size first, then flags, each a letter and its value */
    while (p < ll) {
        while (p < ll && buf[p] == ' ')
            p++;
        size_t s = p;
        while (p < ll && buf[p] != ' ')
            p++;
        if (p == s)
            break;
        const char *t = buf + s;
        size_t tl = p - s;
        if (va && vsize < 0) {
            vsize = 0;
            for (size_t i = 0; i < tl; i++) {
                if (!isdigit((unsigned char)t[i]) || vsize > MC_VALUE_MAX)
                    return -1;
                vsize = vsize * 10 + (t[i] - '0');
            }
            if (vsize > MC_VALUE_MAX)
                return -1;
            continue;
        }
        if (t[0] == 'c' || t[0] == 't') {
            bool neg = tl > 1 && t[1] == '-';
            unsigned long long v = 0;
            size_t i = neg ? 2 : 1;
            if (i >= tl)
                return -1;
            for (; i < tl; i++) {
                unsigned d = (unsigned)(t[i] - '0');
                if (!isdigit((unsigned char)t[i]) || v > (UINT64_MAX - d) / 10)
                    return -1;
                v = v * 10 + d;
            }
            if (t[0] == 'c') {
                if (neg)
                    return -1;
                r->has_cas = true;
                r->cas = v;
            } else {
                r->has_ttl = true;
                r->ttl = neg ? -1 : (v > INT32_MAX ? INT32_MAX : (long long)v);
            }
        }
        /* other flags (ones we did not ask for) are let pass */
    }
    size_t used = ll + 2;
    if (va) {
        if (vsize < 0)
            return -1;
        if (len - used < (size_t)vsize + 2)
            return 0;
        if (buf[used + (size_t)vsize] != '\r' || buf[used + (size_t)vsize + 1] != '\n')
            return -1;
        memcpy(r->value, buf + used, (size_t)vsize);
        r->value[vsize] = '\0';
        r->vlen = (size_t)vsize;
        used += (size_t)vsize + 2;
    }
    return (long)used;
}

/* A decimal number at v[*p..n) followed by a space, at most `digits` long. */
static bool item_number(const char *v, size_t n, size_t *p, int digits, uint64_t *out)
{
    uint64_t x = 0;
    size_t d = *p;
    while (*p < n && isdigit((unsigned char)v[*p]) && *p - d < (size_t)digits)
        x = x * 10 + (uint64_t)(v[(*p)++] - '0');
    if (*p == d || *p >= n || v[*p] != ' ')
        return false;
    (*p)++;
    *out = x;
    return true;
}

bool mc_item_parse(const char *v, size_t n, mc_item *it)
{
    memset(it, 0, sizeof *it);
    if (n < DL_OWNER_HEX + 2 || memchr(v, '\0', n))
        return false;
    for (int i = 0; i < DL_OWNER_HEX; i++)
        if (!isxdigit((unsigned char)v[i]))
            return false;
    memcpy(it->owner, v, DL_OWNER_HEX);
    if (v[DL_OWNER_HEX] != ' ')
        return false;
    size_t p = DL_OWNER_HEX + 1;
    uint64_t since, ttl;
    if (!item_number(v, n, &p, 18, &since) || !item_number(v, n, &p, 19, &it->token) ||
        !item_number(v, n, &p, 10, &ttl))
        return false;
    it->since_ms = (long long)since;
    it->ttl_ms = (long long)ttl;
    const char *nl = memchr(v + p, '\n', n - p);
    size_t hl = nl ? (size_t)(nl - (v + p)) : n - p;
    if (hl >= sizeof it->holder)
        return false;
    memcpy(it->holder, v + p, hl);
    it->holder[hl] = '\0';
    if (nl) {
        size_t vl = n - (size_t)(nl + 1 - v);
        if (vl >= sizeof it->value)
            return false;
        memcpy(it->value, nl + 1, vl);
        it->value[vl] = '\0';
        it->has_value = true;
    }
    return true;
}

int mc_item_format(const mc_item *it, char *out, size_t len)
{
    int n = snprintf(out, len, "%s %lld %" PRIu64 " %lld %s%s%s", it->owner, it->since_ms,
                     it->token, it->ttl_ms, it->holder, it->has_value ? "\n" : "",
                     it->has_value ? it->value : "");
    return n > 0 && (size_t)n < len ? n : -1;
}
