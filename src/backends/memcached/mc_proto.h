/* SPDX-License-Identifier: MIT */
/*
 * mc_proto.h — what the memcached backend reads and writes of the server's
 * bytes: meta protocol replies, and the value of a lock item. Written by
 * hand: memcached's meta protocol has no C client library in Debian
 * (libmemcached speaks the text and binary protocols only). Pure functions:
 * the fuzz target (fuzz/fuzz_memcached.c) links proto.c as it is.
 */
#ifndef DLOCK_MC_PROTO_H
#define DLOCK_MC_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "internal.h"

#define MC_VALUE_MAX 2048 /* the longest item value we read back */
#define MC_KEY_MAX 250    /* memcached's key limit */

typedef struct mc_reply {
    char code[3]; /* "HD" "NS" "EX" "NF" "EN" "VA" "MN" "VE" (VERSION), "ER" (any error) */
    bool has_cas, has_ttl;
    uint64_t cas;
    long long ttl; /* seconds left, -1 for none */
    char value[MC_VALUE_MAX + 1];
    size_t vlen;
    char error[160]; /* "ER": the server's words */
} mc_reply;

/* Parse one reply at buf[0..len): the bytes it took (> 0), 0 when more
 * bytes are needed, -1 when it is not memcached's. A value longer than
 * MC_VALUE_MAX is -1 too (no lock item is). */
long mc_parse(const char *buf, size_t len, mc_reply *r);

/* An item's value: "OWNER SINCE_MS TOKEN TTL_MS HOLDER\nVALUE" (VALUE may
 * be absent). */
typedef struct mc_item {
    char owner[DL_OWNER_HEX + 1];
    long long since_ms;
    uint64_t token;    /* 0: not written yet (the item's CAS is the token) */
    long long ttl_ms;  /* the lease the holder believes in */
    char holder[256];
    char value[256];
    bool has_value;
} mc_item;

/* Read an item's value: false when it is not one of ours. */
bool mc_item_parse(const char *v, size_t n, mc_item *it);
/* The value of it, as mc_item_parse reads it: its length, or -1 when out
 * is too small. */
int mc_item_format(const mc_item *it, char *out, size_t len);

#endif
