/* SPDX-License-Identifier: MIT */
/*
 * fuzz_memcached.c — libFuzzer target for what the memcached backend reads
 * out of the server: meta protocol replies (any bytes a server, or
 * something that is not memcached, could send) and the lock items' values
 * in them.
 *
 * The input is a byte stream as a server would send it. It is parsed
 * whole, reply after reply, and again as it would arrive in pieces: every
 * split point of the first reply (of a few dozen for long inputs), and the
 * whole stream in chunks of varying size, the way mc_call reads it. A
 * parser that says "need more" (0) on a prefix must, given the rest, find
 * exactly the reply it finds in the whole; one that takes bytes or refuses
 * them on a prefix must do the same on the whole. What it accepts must hold
 * together: the bytes taken within the buffer and ending in CRLF, a known
 * code, a value of at most MC_VALUE_MAX bytes copied as sent and
 * terminated, the error text terminated. The input, and every value a VA
 * reply carries, is also read as a lock item: its owner 32 hex digits, its
 * holder and value terminated and bounded, and written back the way the
 * backend writes items it reads the same.
 *
 * The parsers' file (src/backends/memcached/proto.c) is linked as it is:
 * it needs no library and nothing of the core.
 */
#include <ctype.h>
#include <inttypes.h>
#include <string.h>

#include "fuzz.h"

#include "backends/memcached/mc_proto.h"

#define MAX_REPLIES 64

/* Read as an item value, and written back by mc_item_format (as the
 * backend writes its items). */
static void check_item(const char *v, size_t n)
{
    mc_item it;
    if (!mc_item_parse(v, n, &it)) {
        CHECK(it.owner[0] == '\0' || strlen(it.owner) == DL_OWNER_HEX);
        return;
    }
    CHECK(n >= DL_OWNER_HEX + 2);
    CHECK(strlen(it.owner) == DL_OWNER_HEX);
    for (int i = 0; i < DL_OWNER_HEX; i++)
        CHECK(isxdigit((unsigned char)it.owner[i]) && it.owner[i] == v[i]);
    CHECK(strlen(it.holder) < sizeof it.holder);
    CHECK(strlen(it.value) < sizeof it.value);
    CHECK(it.has_value || it.value[0] == '\0');
    CHECK(it.since_ms >= 0);
    CHECK(!memchr(it.holder, '\n', strlen(it.holder)));

    char again[DL_OWNER_HEX + 96 + sizeof it.holder + sizeof it.value];
    int k = mc_item_format(&it, again, sizeof again);
    CHECK(k > 0);
    mc_item it2;
    CHECK(mc_item_parse(again, (size_t)k, &it2));
    CHECK(strcmp(it.owner, it2.owner) == 0);
    CHECK(it.since_ms == it2.since_ms && it.token == it2.token && it.ttl_ms == it2.ttl_ms);
    CHECK(strcmp(it.holder, it2.holder) == 0);
    CHECK(it.has_value == it2.has_value && strcmp(it.value, it2.value) == 0);
}

/* The number of a reply's last flag `letter` (c: CAS, t: TTL) as its line
 * writes it: 1 found (*v, *neg), 0 none, -1 more than 64 bits. */
static int flag_of(const char *line, size_t ll, bool va, char letter, uint64_t *v, bool *neg)
{
    int found = 0;
    bool first = true;
    for (size_t p = 2; p < ll;) {
        while (p < ll && line[p] == ' ')
            p++;
        size_t s = p;
        while (p < ll && line[p] != ' ')
            p++;
        if (p == s)
            break;
        if (va && first) { /* VA's size */
            first = false;
            continue;
        }
        if (line[s] != letter)
            continue;
        size_t i = s + 1;
        *neg = i < p && line[i] == '-';
        if (*neg)
            i++;
        uint64_t x = 0;
        found = 1;
        for (; i < p; i++) {
            unsigned d = (unsigned)(line[i] - '0');
            if (x > (UINT64_MAX - d) / 10) {
                found = -1;
                break;
            }
            x = x * 10 + d;
        }
        if (found == 1)
            *v = x;
        else
            return -1;
    }
    return found;
}

/* What one accepted reply must say, taken (used bytes) from buf. */
static void check_reply(const char *buf, long used, const mc_reply *r)
{
    CHECK(used >= 3);
    CHECK(buf[used - 2] == '\r' && buf[used - 1] == '\n');
    static const char *const known[] = {"HD", "NS", "EX", "NF", "EN", "VA", "MN", "VE", "ER"};
    bool ok = false;
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        ok = ok || strcmp(r->code, known[i]) == 0;
    CHECK(ok);
    CHECK(r->vlen <= MC_VALUE_MAX);
    CHECK(r->value[r->vlen] == '\0');
    CHECK(strlen(r->error) < sizeof r->error);
    CHECK(r->has_ttl || r->ttl == -1);
    CHECK(r->ttl >= -1 && r->ttl <= INT32_MAX);
    CHECK(r->has_cas || r->cas == 0);
    if (strcmp(r->code, "ER") == 0) {
        CHECK(r->error[0] != '\0');
        CHECK(strncmp(buf, r->error, strlen(r->error)) == 0);
        CHECK(r->vlen == 0 && !r->has_cas && !r->has_ttl);
    } else {
        CHECK(r->error[0] == '\0');
    }
    if (strcmp(r->code, "ER") != 0 && strcmp(r->code, "VE") != 0) {
        /* the CAS value and TTL are the numbers the line says: none is
         * taken modulo 2^64 */
        size_t ll = (size_t)((const char *)memchr(buf, '\n', (size_t)used) - buf) - 1;
        bool va = strcmp(r->code, "VA") == 0, neg = false;
        uint64_t v = 0;
        int f = flag_of(buf, ll, va, 'c', &v, &neg);
        CHECK(f >= 0);
        CHECK(r->has_cas == (f == 1));
        if (f == 1)
            CHECK(!neg && r->cas == v);
        f = flag_of(buf, ll, va, 't', &v, &neg);
        CHECK(f >= 0);
        CHECK(r->has_ttl == (f == 1));
        if (f == 1)
            CHECK(r->ttl == (neg ? -1 : v > INT32_MAX ? INT32_MAX : (long long)v));
    }
    if (strcmp(r->code, "VA") == 0) {
        /* the header line, then exactly vlen bytes of value and CRLF */
        const char *eol = memchr(buf, '\n', (size_t)used);
        CHECK(eol != NULL);
        size_t head = (size_t)(eol - buf) + 1;
        CHECK(head + r->vlen + 2 == (size_t)used);
        CHECK(memcmp(r->value, buf + head, r->vlen) == 0);
        check_item(r->value, r->vlen);
    } else {
        CHECK(r->vlen == 0 && r->value[0] == '\0');
        /* one line: its only LF at the end */
        CHECK(memchr(buf, '\n', (size_t)used) == buf + used - 1);
    }
}

/* Replies parsed from the whole stream: their count, and at *end the code
 * that stopped the walk (0 = the rest is incomplete, -1 = not memcached's). */
static int parse_all(const char *buf, size_t len, mc_reply *out, long *used, long *end)
{
    size_t at = 0;
    int n = 0;
    *end = 0;
    while (n < MAX_REPLIES) {
        long u = mc_parse(buf + at, len - at, &out[n]);
        CHECK(u >= -1 && u <= (long)(len - at));
        if (u <= 0) {
            *end = u;
            break;
        }
        check_reply(buf + at, u, &out[n]);
        used[n++] = u;
        at += (size_t)u;
    }
    return n;
}

/* A prefix of len bytes of the first reply's bytes must agree with the whole. */
static void check_prefix(const char *buf, size_t len, long whole, const mc_reply *wr)
{
    static mc_reply r;
    long u = mc_parse(buf, len, &r);
    CHECK(u >= -1 && u <= (long)len);
    if (u == 0)
        return; /* more needed: the whole decides */
    CHECK(u == whole);
    if (u > 0)
        CHECK(memcmp(&r, wr, sizeof r) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *buf = (const char *)data;
    static mc_reply whole[MAX_REPLIES], r;
    long used[MAX_REPLIES], end;

    /* The whole stream, reply after reply. */
    int n = parse_all(buf, size, whole, used, &end);

    /* The first reply from every prefix (a few dozen of a long input). */
    long first = n > 0 ? used[0] : end;
    if (size <= 600) {
        for (size_t k = 0; k <= size; k++)
            check_prefix(buf, k, first, &whole[0]);
    } else {
        for (size_t k = 0; k <= 32; k++) {
            check_prefix(buf, k, first, &whole[0]);
            check_prefix(buf, size - k, first, &whole[0]);
            check_prefix(buf, (size_t)((uint64_t)size * k / 33), first, &whole[0]);
        }
        if (first > 0)
            for (long k = first - 4; k <= first; k++)
                if (k >= 0)
                    check_prefix(buf, (size_t)k, first, &whole[0]);
    }

    /* The stream as it arrives: chunks of 1..17 bytes (sizes taken from
     * the data), each reply parsed as soon as it is complete, as mc_call
     * does. The same replies, and the same verdict at the end. */
    size_t have = 0, at = 0;
    int got = 0;
    long verdict = 0;
    for (size_t i = 0; verdict == 0 && got < n;) {
        size_t chunk = size ? (size_t)data[i % size] % 17 + 1 : 1;
        i++;
        have = have + chunk > size ? size : have + chunk;
        for (;;) {
            long u = mc_parse(buf + at, have - at, &r);
            CHECK(u >= -1 && u <= (long)(have - at));
            if (u < 0) {
                verdict = -1;
                break;
            }
            if (u == 0)
                break;
            CHECK(got < n && u == used[got]);
            CHECK(memcmp(&r, &whole[got], sizeof r) == 0);
            at += (size_t)u;
            got++;
            if (got == n)
                break;
        }
        if (have == size)
            break;
    }
    CHECK(verdict == 0); /* a prefix never refuses what the whole accepts */
    CHECK(got == n);

    /* The raw input as a lock item's value (view_add reads them so). */
    check_item(buf, size);
    return 0;
}
